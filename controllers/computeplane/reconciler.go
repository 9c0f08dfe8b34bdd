// Package controllers holds the reconcilers: one per owned concern, each with the same
// skeleton (fetch → finalizer → deferred status patch → ordered phases; deletion in an
// explicit order).
package computeplane

import (
	"context"
	"sync"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/tenancy"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/ssa"
)

// FieldOwner is the server-side apply field manager of everything this reconciler writes.
const FieldOwner = "computeplane-controller"

// Reconciler drives a ComputePlane through its lifecycle stages.
type Reconciler struct {
	client.Client
	// APIReader reads around the cache where a stale read would be unsafe.
	APIReader client.Reader
	Events    events.EventRecorder
	// RequeueInterval is how long a plane waiting on something that sends no event waits
	// before it looks again (jittered by up to 20%).
	RequeueInterval time.Duration
	// Planes holds the connections to the planes' own API servers.
	Planes *remote.ClusterCache
	// Addons is the add-on releases' cache, which every HelmRelease read of the
	// reconciler's client goes to (withAddons; nil: read through Client);
	// SetupWithManager makes it.
	Addons cache.Cache
	// TokenLifetime of the applier's tokens (renewed after two thirds of it).
	TokenLifetime time.Duration
	// ResyncInterval is the longest a plane whose watches saw nothing goes without a
	// full read (zero: every pass reads it in full).
	ResyncInterval time.Duration
	// CapabilityLabel is the discovery beacon's key on a Ready plane's namespace (empty:
	// none).
	CapabilityLabel string
	// PassTimeout bounds a pass's phases (or teardown stages), so that a plane whose API
	// answers each request just within the request timeout cannot hold a worker for the
	// sum of them; zero: unbounded. Past it the pass fails like an unanswered request.
	PassTimeout time.Duration

	controller controller.Controller

	// state is what the reconciler remembers of each plane between passes (verified
	// stages, drift series, grants hash, admin credential, teardown progress, own status
	// write, credential Secrets' digests): planeState.
	state planeStates

	// secrets is what the operator needs to bind its Secret rights per namespace.
	secrets secretAccess
	// compared remembers which versions of the management objects were found as the
	// operator wants them (never a plane's: a different cluster's versions).
	compared     ssa.Comparisons
	comparedOnce sync.Once
	// secretVersions holds the Secrets read, each until its namespace's watch reports
	// another version (nil: every read goes to the API server).
	secretVersions *secretVersions
	// Shard is the set of planes this manager reconciles; the others' managers see to
	// theirs.
	Shard tenancy.Shard
}

// +kubebuilder:rbac:groups=computeplane.cozystack.io,resources=computeplanes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=computeplane.cozystack.io,resources=computeplanes/status,verbs=patch
// +kubebuilder:rbac:groups=computeplane.cozystack.io,resources=computeplanes/finalizers,verbs=update
// +kubebuilder:rbac:groups=computeplane.cozystack.io,resources=computeplaneclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler and its watches (the indexes it lists by are
// tenancy.Indexes, which the manager registers first).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options, reconcileRequests bool) error {
	// The state gauges read this manager's planes.
	fleet.use(mgr.GetClient(), r.Planes, r.Shard)
	// A label change may move the plane between shards: both managers must look.
	own := predicate.Predicate(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))
	if reconcileRequests {
		own = predicate.Or(own, reconcileRequestedPredicate{})
	}
	if r.Addons == nil {
		addons, err := newAddonCache(mgr)
		if err != nil {
			return err
		}
		r.Addons = addons
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&cpv1.ComputePlane{}, builder.WithPredicates(own)).
		// A plane's class decides whether its spec is valid: re-check on every class change.
		Watches(&cpv1.ComputePlaneClass{}, handler.EnqueueRequestsFromMapFunc(r.planesOfClass)).
		// When the first plane of a namespace goes, a duplicate created in a race takes over.
		Watches(&cpv1.ComputePlane{}, handler.EnqueueRequestsFromMapFunc(r.otherPlanesInNamespace),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc:  func(event.CreateEvent) bool { return false },
				UpdateFunc:  func(event.UpdateEvent) bool { return false },
				GenericFunc: func(event.GenericEvent) bool { return false },
			})).
		// What the providers report about the objects the operator applied.
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(planeFromLabels)).
		Watches(&clusterv1.MachineDeployment{}, handler.EnqueueRequestsFromMapFunc(planeFromLabels)).
		// A health check changed by someone is restored at once.
		Watches(&clusterv1.MachineHealthCheck{}, handler.EnqueueRequestsFromMapFunc(planeFromLabels)).
		// An add-on release wakes the plane whose infrastructure namespace holds it, never
		// the plane its labels name: anyone may label a HelmRelease of theirs like an
		// add-on (the cache's selector takes it in), and a tenant's would then keep
		// another tenant's plane reconciling.
		WatchesRawSource(source.Kind(r.Addons, &helmv2.HelmRelease{}, handler.TypedEnqueueRequestsFromMapFunc(r.planesOfAddon))).
		// A plane's baseline carries its labels; a namespace's default deny does not.
		Watches(&ciliumv2.CiliumNetworkPolicy{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []ctrl.Request {
			if reqs := planeFromLabels(ctx, o); reqs != nil {
				return reqs
			}
			return r.planesOfInfraNamespace(ctx, o)
		})).
		Watches(kamajiControlPlaneKind(), handler.EnqueueRequestsFromMapFunc(planeFromLabels)).
		// Kamaji's CAPI provider copies the KamajiControlPlane's labels onto the
		// TenantControlPlane (v0.20.0), but they are another component's copy: map by
		// the infrastructure namespace, which only the operator's planes use.
		Watches(&kamajiv1alpha1.TenantControlPlane{}, handler.EnqueueRequestsFromMapFunc(r.planesOfInfraNamespace)).
		// A Service that opts in or out (or goes) changes its plane's grants.
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.planesInNamespace),
			builder.WithPredicates(serviceAccessChanged{})).
		// A tenant namespace's labels decide which classes it may use; an infrastructure
		// namespace in the way (not the plane's own) may be removed by a person.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.planesOfNamespace)).
		WithOptions(opts).
		Build(r)
	if err != nil {
		return err
	}
	r.controller = c
	// Inside each plane, watch what the hardening owns: a namespace created or relabelled,
	// a policy deleted, reconciles the plane at once.
	if err := c.Watch(r.Planes.Source()); err != nil {
		return err
	}
	// The Secrets a plane depends on, each watched in its namespace once read.
	meta, err := metadata.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	r.secretVersions = &secretVersions{meta: meta}
	return c.Watch(r.secretVersions.Source())
}

// Reconcile runs the skeleton: fetch, finalizer, deferred status patch, phases.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	plane := &cpv1.ComputePlane{}
	if err := r.Get(ctx, req.NamespacedName, plane); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone, with or without its teardown: stop talking to it.
			r.forgetPlane(req.NamespacedName)
			// Gone without its teardown (which takes the beacon away first), say.
			return ctrl.Result{}, r.signalCapability(ctx, req.Namespace, req.Name, false)
		}
		return ctrl.Result{}, err
	}
	if !r.Shard.Holds(plane) {
		// Another shard's (a plane moved away, or an event about another shard's plane):
		// let go of its connection and watches; the other manager takes it from here.
		r.forgetPlane(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if r.state.behind(req.NamespacedName, plane.ResourceVersion, time.Now()) {
		// The informer has not delivered this controller's own last status write yet.
		return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
	}

	if plane.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(plane, cpv1.ComputePlaneFinalizer) {
		patch := client.MergeFromWithOptions(plane.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(plane, cpv1.ComputePlaneFinalizer)
		if err := r.Patch(ctx, plane, patch, client.FieldOwner(FieldOwner)); err != nil {
			return ctrl.Result{}, err
		}
	}

	// A person's reconcile request reads everything afresh, the Secrets too.
	s := &scope{plane: plane, results: map[string]stageResult{}, freshSecrets: reconcileRequested(plane)}
	before := plane.Status.DeepCopy()
	defer func() {
		if err := r.patchStatus(ctx, s, before, retErr); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()

	if !plane.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// comparisons is the reconciler's memory of its management comparisons. The manager's
// cache holds some kinds as their identity alone (ContentlessKinds): a comparison reads
// a version of those it does not remember through APIReader (none: it fails).
func (r *Reconciler) comparisons() *ssa.Comparisons {
	r.comparedOnce.Do(func() { r.compared.Fresh, r.compared.Trimmed = r.APIReader, ContentlessKinds() })
	return &r.compared
}
