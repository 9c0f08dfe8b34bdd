package devprovider

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cozystack/computeplane/internal/devenv"
)

// Start runs the provider in a manager of its own with cfg's rights (an admin's: the
// providers it stands in for are other components than the operator, which keeps only
// its shipped RBAC), until ctx ends or stop is called. stop also stops every tenant
// apiserver.
func Start(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (p *Provider, stop func(), err error) {
	return StartWith(ctx, cfg, scheme, Options{})
}

// Options shape a provider Start runs (the Provider fields of the same names).
type Options struct {
	Shared int
	Tenant devenv.TenantOptions
}

// StartWith is Start with options.
func StartWith(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, o Options) (p *Provider, stop func(), err error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// Suites and benchmarks start one per run, several in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		return nil, nil, err
	}
	p = &Provider{Client: mgr.GetClient(), Scheme: scheme, Shared: o.Shared, TenantOptions: o.Tenant}
	if err := p.SetupWithManager(mgr); err != nil {
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(runCtx) }()
	return p, func() { cancel(); <-done; p.Stop() }, nil
}
