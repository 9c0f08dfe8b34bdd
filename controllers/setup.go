// Package controllers wires the operator's controllers into a manager: the ComputePlane
// controller (controllers/computeplane), the placement controller (controllers/placement)
// and their webhooks, the indexes and informers they share, and the metrics endpoint.
// The two controllers never import each other: they meet through the API (each writes
// its own part of a ComputePlane's status) and the rules of controllers/tenancy.
package controllers

import (
	"context"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/computeplane"
	"github.com/cozystack/computeplane/controllers/placement"
	"github.com/cozystack/computeplane/controllers/tenancy"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/remote/posture"
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
	// none; computeplane.CheckCapabilityLabel says which keys are allowed).
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
	Shard tenancy.Shard
}

// SetupOptions are the manager flags that shape the controllers.
type SetupOptions struct {
	controller.Options
	// ReconcileRequests makes a change of the reconcile.fluxcd.io/requestedAt annotation
	// trigger a reconcile of a ComputePlane, as Flux's objects do.
	ReconcileRequests bool
}

// LeaderElectionID names the Lease the manager's replicas elect their leader with.
const LeaderElectionID = "computeplane-operator.computeplane.cozystack.io"

// Setup registers the shared indexes, every controller and webhook with the manager,
// and returns the ComputePlane reconciler (tests look into its plane cache).
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) (*computeplane.Reconciler, error) {
	for _, ix := range tenancy.Indexes() {
		if err := mgr.GetFieldIndexer().IndexField(ctx, &cpv1.ComputePlane{}, ix.Field,
			func(obj client.Object) []string { return ix.Extract(obj.(*cpv1.ComputePlane)) }); err != nil {
			return nil, err
		}
	}
	if o.ApplierTokenLifetime == 0 {
		o.ApplierTokenLifetime = time.Hour
	}
	r := &computeplane.Reconciler{
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
			WatchSelector: labels.SelectorFromSet(labels.Set{cpv1.ManagedByLabel: cpv1.ManagedByValue}),
			OnWatchEvent:  computeplane.CountPlaneWatchEvent,
			Log:           mgr.GetLogger().WithName("planes"),
		},
	}
	if err := mgr.Add(r.Planes); err != nil {
		return nil, err
	}
	if err := r.SetupWithManager(mgr, o.Setup.Options, o.Setup.ReconcileRequests); err != nil {
		return nil, err
	}
	pl := &placement.Reconciler{Client: mgr.GetClient(), Events: mgr.GetEventRecorder("computeplane-placement"), Shard: o.Shard,
		Leftovers: &remote.Leftovers{Planes: r.Planes}, RequeueInterval: o.RequeueInterval}
	if err := pl.SetupWithManager(mgr, o.Setup.Options); err != nil {
		return nil, err
	}
	if o.Webhooks {
		if err := (&computeplane.Validator{Reader: mgr.GetAPIReader()}).SetupWebhookWithManager(mgr); err != nil {
			return nil, err
		}
		(&placement.Webhook{Reader: mgr.GetAPIReader(), Cache: mgr.GetClient()}).SetupWithManager(mgr)
		(&placement.CopyGuard{Client: mgr.GetClient(), IsPlaneSubject: isPlaneSubject}).SetupWithManager(mgr.GetWebhookServer())
	}
	return r, nil
}

// isPlaneSubject says whether a token's subject is one the operator issues plane tokens
// to: a ServiceAccount of its own namespace in the plane (the applier, the autoscaler),
// where nothing else runs.
func isPlaneSubject(sub string) bool {
	return strings.HasPrefix(sub, "system:serviceaccount:"+posture.ApplierNamespace+":")
}
