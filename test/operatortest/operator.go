// Package operatortest runs the operator's manager in a suite's or benchmark's process,
// against a devenv management cluster, as its ServiceAccount.
package operatortest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/cozystack/computeplane/controllers/computeplane"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
)

// Options shape an operator a suite or benchmark runs in its process.
type Options struct {
	controllers.Options
	// WrapTransport wraps the operator's transport to the management apiserver (to
	// count its requests).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// MetricsAddr serves /metrics there as the shipped manager does (HTTPS,
	// authenticated); empty serves none.
	MetricsAddr string
	// RecoverPanic false makes a panicking reconcile fail the run (the default logs it).
	RecoverPanic *bool
}

// Operator is the operator's manager running against a management cluster as its
// ServiceAccount (OperatorConfig: exactly the RBAC config/default ships).
type Operator struct {
	Manager    ctrl.Manager
	Reconciler *computeplane.Reconciler
	webhooks   bool

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan error
}

// New sets the operator's controllers (and webhooks, when o.Webhooks, served
// where the management Cluster's webhook configurations point) up on mgmt; Start runs
// it. Several may run in one process, one after another (a restart).
func New(ctx context.Context, mgmt *devenv.Cluster, o Options) (*Operator, error) {
	if mgmt.OperatorConfig == nil {
		return nil, errors.New("the management cluster has no operator identity (started Bare)")
	}
	cfg := rest.CopyConfig(mgmt.OperatorConfig)
	cfg.WrapTransport = o.WrapTransport
	metrics := metricsserver.Options{BindAddress: "0"}
	if o.MetricsAddr != "" {
		metrics = controllers.MetricsServerOptions(o.MetricsAddr, true)
	}
	opts := ctrl.Options{
		Scheme:                 mgmt.Client.Scheme(),
		Cache:                  controllers.CacheOptions(),
		Client:                 controllers.ClientOptions(),
		Metrics:                metrics,
		HealthProbeBindAddress: "0",
		// As deployed: the shipped leader-election Role is exercised, and a restarted
		// operator takes the lease over from the one it replaces.
		LeaderElection:                true,
		LeaderElectionID:              controllers.LeaderElectionIDFor(o.Shard.Selector),
		LeaderElectionNamespace:       devenv.OperatorNamespace,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(true), RecoverPanic: o.RecoverPanic},
	}
	if o.Webhooks {
		opts.WebhookServer = mgmt.WebhookServer()
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	r, err := controllers.Setup(ctx, mgr, o.Options)
	if err != nil {
		return nil, err
	}
	return &Operator{Manager: mgr, Reconciler: r, webhooks: o.Webhooks}, nil
}

// Start sets the operator up and runs it.
func Start(ctx context.Context, mgmt *devenv.Cluster, o Options) (*Operator, error) {
	op, err := New(ctx, mgmt, o)
	if err != nil {
		return nil, err
	}
	return op, op.Start(ctx)
}

// Start runs the manager until Stop (or ctx ends) and returns once its caches have
// synced and, with webhooks, its webhook server serves.
func (op *Operator) Start(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(ctx)
	op.cancel, op.done = cancel, make(chan error, 1)
	go func() { op.done <- op.Manager.Start(runCtx) }()
	if !op.Manager.GetCache().WaitForCacheSync(runCtx) {
		return fmt.Errorf("the operator's caches did not sync")
	}
	if !op.webhooks {
		return nil
	}
	started := op.Manager.GetWebhookServer().StartedChecker()
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return started(&http.Request{}) == nil, nil })
}

// Stop stops the manager (as a crash or a rolled pod would) and returns its error.
func (op *Operator) Stop() error {
	var err error
	op.stopOnce.Do(func() {
		if op.cancel == nil {
			return
		}
		op.cancel()
		err = <-op.done
		if errors.Is(err, context.DeadlineExceeded) {
			// A runnable outlived the grace period: say which, or the next run cannot tell.
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			err = fmt.Errorf("%w; the process's goroutines, by stack:\n%s", err, stacks.String())
		}
	})
	return err
}
