package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/remote"
)

// Options configure the controllers the manager runs.
type Options struct {
	Setup SetupOptions
	// RequeueInterval is how long a plane waiting on something that sends no event
	// waits before it looks again.
	RequeueInterval time.Duration
	// Webhooks registers the admission webhooks (off only for local runs without TLS).
	Webhooks bool
	// PlaneTimeout bounds every request to a plane's API server.
	PlaneTimeout time.Duration
	// PlanePassTimeout bounds one reconcile pass of a plane (zero: unbounded).
	PlanePassTimeout time.Duration
	// CapabilityLabel is the discovery beacon's key on a Ready plane's namespace (empty:
	// none; CheckCapabilityLabel says which keys are allowed).
	CapabilityLabel string
	// PlaneUnreachableGrace is how long a plane may not answer before its conditions
	// say so (a blip does not close the gate visibly; it never opens it either).
	PlaneUnreachableGrace time.Duration
	// ApplierTokenLifetime of the applier's kubeconfig tokens (at least 10 minutes, the
	// TokenRequest API's minimum); zero means one hour.
	ApplierTokenLifetime time.Duration
	// PlaneResyncInterval is the longest a Ready plane whose watches report nothing goes
	// without a full read of what the operator keeps in it (zero: every pass reads it
	// in full, every RequeueInterval).
	PlaneResyncInterval time.Duration
	// Shard is the set of planes this manager reconciles (zero: all).
	Shard Shard
}

// LeaderElectionID names the Lease the manager's replicas elect their leader with.
const LeaderElectionID = "computeplane-operator.computeplane.cozystack.io"

// Setup registers every controller and webhook with the manager, and returns the
// ComputePlane reconciler (tests look into its plane cache).
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) (*ComputePlaneReconciler, error) {
	if o.ApplierTokenLifetime == 0 {
		o.ApplierTokenLifetime = time.Hour
	}
	r := &ComputePlaneReconciler{
		Client:          mgr.GetClient(),
		APIReader:       mgr.GetAPIReader(),
		Events:          mgr.GetEventRecorder("computeplane-controller"),
		RequeueInterval: o.RequeueInterval,
		TokenLifetime:   max(o.ApplierTokenLifetime, 10*time.Minute),
		ResyncInterval:  o.PlaneResyncInterval,
		PassTimeout:     o.PlanePassTimeout,
		CapabilityLabel: o.CapabilityLabel,
		Shard:           o.Shard,
		Planes: &remote.ClusterCache{
			Scheme:        mgr.GetScheme(),
			Timeout:       o.PlaneTimeout,
			ProbeInterval: o.PlaneTimeout,
			Grace:         o.PlaneUnreachableGrace,
			// The probe a settled plane's passes made, without the passes.
			HealthInterval: o.RequeueInterval,
			// Inside a plane only what the operator labelled is cached (and every
			// namespace): the tenant does not decide the operator's memory.
			WatchSelector: labels.SelectorFromSet(labels.Set{render.ManagedByLabel: render.ManagedByValue}),
			OnWatchEvent: func(resource, event string) {
				planeWatchEvents.WithLabelValues(resource, event).Inc()
			},
			Log: mgr.GetLogger().WithName("planes"),
		},
	}
	if err := mgr.Add(r.Planes); err != nil {
		return nil, err
	}
	fleet.use(mgr.GetClient(), r.Planes, o.Shard)
	if err := r.SetupWithManager(ctx, mgr, o.Setup); err != nil {
		return nil, err
	}
	placement := &PlacementReconciler{Client: mgr.GetClient(), Events: mgr.GetEventRecorder("computeplane-placement"), Shard: o.Shard}
	if err := placement.SetupWithManager(mgr, o.Setup.Options); err != nil {
		return nil, err
	}
	if o.Webhooks {
		if err := (&ComputePlaneValidator{Reader: mgr.GetAPIReader()}).SetupWebhookWithManager(mgr); err != nil {
			return nil, err
		}
		(&PlacementWebhook{Reader: mgr.GetAPIReader(), Cache: mgr.GetClient()}).SetupWithManager(mgr)
	}
	return r, nil
}
