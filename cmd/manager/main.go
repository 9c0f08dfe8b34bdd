// Command manager runs the ComputePlane operator on a management cluster.
package main

import (
	"flag"
	"os"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/controllers/computeplane"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

// options are the manager's flags.
type options struct {
	metricsAddr, probeAddr, leaderNS, certDir string
	pprofAddr                                 string
	watchSelector                             string
	leaderElect, webhooks, reconcileRequests  bool
	secureMetrics                             bool
	concurrent, webhookPort                   int
	requeue, minRetry, maxRetry               time.Duration
	planeTimeout, planeGrace, tokenLifetime   time.Duration
	planePassTimeout                          time.Duration
	capabilityLabel                           string
	planeResync                               time.Duration
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

// bindFlags registers the manager's flags on the command line.
func bindFlags() *options {
	f := &options{}
	flag.StringVar(&f.metricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.BoolVar(&f.secureMetrics, "metrics-secure", true,
		"Serve metrics over HTTPS to callers the management API server authenticates and authorizes (get on the /metrics non-resource URL, as the computeplane-metrics-reader ClusterRole grants).")
	flag.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.StringVar(&f.pprofAddr, "pprof-bind-address", "",
		"Address of the Go profiling endpoints (/debug/pprof/), to find what holds the manager's memory; empty (the default) disables them. They are not authenticated: bind them to loopback (127.0.0.1:6060) and port-forward.")
	flag.BoolVar(&f.leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles.")
	flag.StringVar(&f.leaderNS, "leader-election-namespace", "", "Namespace of the leader lease; empty means the pod's namespace.")
	// As Flux's controllers name them: how long a replica that died (and so did not
	// release the lease) blocks its successor is the lease duration.
	flag.DurationVar(&f.leaseDuration, "leader-election-lease-duration", 15*time.Second, "How long a leader lease is valid without renewal: the longest a killed leader's successor waits.")
	flag.DurationVar(&f.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader tries to renew its lease before it gives leadership up.")
	flag.DurationVar(&f.retryPeriod, "leader-election-retry-period", 2*time.Second, "How often replicas try to take or renew the lease.")
	flag.StringVar(&f.watchSelector, "watch-label-selector", "",
		"Reconcile only the ComputePlanes this label selector matches (a shard, e.g. 'sharding.fluxcd.io/key in (shard1)'; the main instance then runs with '!sharding.fluxcd.io/key'). Each shard elects its own leader.")
	flag.IntVar(&f.concurrent, "concurrent", 4, "ComputePlanes reconciled in parallel.")
	flag.DurationVar(&f.requeue, "requeue-interval", 30*time.Second, "How often a plane waiting on something that sends no event looks again, and how often each watched plane gets the storage probe that finds a datastore gone under a live API server (jittered).")
	flag.DurationVar(&f.minRetry, "min-retry-delay", 750*time.Millisecond, "First backoff after a transient error.")
	flag.DurationVar(&f.maxRetry, "max-retry-delay", 15*time.Minute, "Longest backoff after repeated transient errors.")
	flag.DurationVar(&f.planeTimeout, "plane-timeout", 10*time.Second, "Timeout of every request to a plane's API server (and how long a successful health probe is trusted).")
	flag.DurationVar(&f.planePassTimeout, "plane-pass-timeout", time.Minute,
		"Longest one reconcile pass of a plane may take: past it the pass fails like an unanswered request (the gate closes, the plane is retried with backoff), so a plane whose API answers slowly holds a worker no longer than this; 0: unbounded.")
	flag.DurationVar(&f.planeGrace, "plane-unreachable-grace", 30*time.Second, "How long a plane's API server may not answer before its conditions say PlaneUnreachable.")
	flag.DurationVar(&f.planeResync, "plane-resync-interval", time.Hour,
		"Longest a Ready plane whose watches report no change goes without a full read of what the operator keeps in it (between, it has no pass unless something wakes it: its watches, a failed probe, a change of its own objects); 0 reads it in full every pass, every --requeue-interval. A safety net: what no watch reports, the operator-objects policy (watched) lets no one else change.")
	flag.DurationVar(&f.tokenLifetime, "applier-token-lifetime", time.Hour, "Lifetime of the applier kubeconfig tokens (renewed after two thirds; at least 10m).")
	flag.BoolVar(&f.reconcileRequests, "reconcile-requests", true,
		"Reconcile when the reconcile.fluxcd.io/requestedAt annotation changes, and echo it in status.lastHandledReconcileAt.")
	flag.StringVar(&f.capabilityLabel, "capability-label", cpv1.DefaultCapabilityLabel,
		"Label the operator sets on a Ready plane's namespace, naming the plane, and removes when its gate closes (the capabilities design's discovery beacon); it must start with "+cpv1.CapabilityLabelPrefix+", empty sets none.")
	flag.BoolVar(&f.webhooks, "enable-webhooks", true, "Serve the admission webhooks (needs a serving certificate).")
	flag.IntVar(&f.webhookPort, "webhook-port", 9443, "Port of the admission webhook server.")
	flag.StringVar(&f.certDir, "webhook-cert-dir", "", "Directory with tls.crt and tls.key for the webhook server; empty means the default.")
	return f
}

func main() {
	f := bindFlags()
	// Stack traces only for panics: a terminal (Stalled) reconcile is logged as an error
	// and needs no trace. --zap-stacktrace-level overrides.
	zapOpts := zap.Options{StacktraceLevel: zapcore.DPanicLevel}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	tuneMemory(log)
	if err := computeplane.CheckCapabilityLabel(f.capabilityLabel); err != nil {
		log.Error(err, "checking --capability-label")
		os.Exit(1)
	}
	shard, err := labels.Parse(f.watchSelector)
	if err != nil {
		log.Error(err, "parsing --watch-label-selector")
		os.Exit(1)
	}

	cfg := ctrl.GetConfigOrDie()
	controllers.CountPlaneRequestsTogether(cfg.Host)
	mgr, err := ctrl.NewManager(cfg, f.managerOptions(shard))
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if _, err := controllers.Setup(ctx, mgr, f.controllerOptions(shard)); err != nil {
		log.Error(err, "setting up the controllers")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "adding the health check")
		os.Exit(1)
	}
	ready := healthz.Ping
	if f.webhooks {
		ready = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		log.Error(err, "adding the readiness check")
		os.Exit(1)
	}
	log.Info("starting the manager", "shard", shard.String())
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}

// managerOptions are the manager's options from the flags, for the shard's selector.
func (f *options) managerOptions(shard labels.Selector) ctrl.Options {
	return ctrl.Options{
		Scheme:                        controllers.NewScheme(),
		Cache:                         controllers.CacheOptions(),
		Client:                        controllers.ClientOptions(),
		Metrics:                       controllers.MetricsServerOptions(f.metricsAddr, f.secureMetrics),
		HealthProbeBindAddress:        f.probeAddr,
		PprofBindAddress:              f.pprofAddr,
		LeaderElection:                f.leaderElect,
		LeaderElectionID:              controllers.LeaderElectionIDFor(shard),
		LeaderElectionNamespace:       f.leaderNS,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &f.leaseDuration,
		RenewDeadline:                 &f.renewDeadline,
		RetryPeriod:                   &f.retryPeriod,
		WebhookServer:                 webhook.NewServer(webhook.Options{Port: f.webhookPort, CertDir: f.certDir}),
	}
}

// controllerOptions are the controllers' options from the flags.
func (f *options) controllerOptions(shard labels.Selector) controllers.Options {
	return controllers.Options{
		Setup: controllers.SetupOptions{
			Options: controller.Options{
				MaxConcurrentReconciles: f.concurrent,
				RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](f.minRetry, f.maxRetry),
			},
			ReconcileRequests: f.reconcileRequests,
		},
		RequeueInterval:       f.requeue,
		Webhooks:              f.webhooks,
		PlaneTimeout:          f.planeTimeout,
		PlanePassTimeout:      f.planePassTimeout,
		CapabilityLabel:       f.capabilityLabel,
		PlaneUnreachableGrace: f.planeGrace,
		PlaneResyncInterval:   f.planeResync,
		ApplierTokenLifetime:  f.tokenLifetime,
		Shard:                 tenancy.Shard{Selector: shard},
	}
}
