// Package controllers holds the reconcilers: one per owned concern, each with the same
// skeleton (fetch → finalizer → deferred status patch → ordered phases; deletion in an
// explicit order).
package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
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
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/ssa"
	"github.com/cozystack/computeplane/remote"
)

// FieldOwner is the server-side apply field manager of everything this reconciler writes.
const FieldOwner = "computeplane-controller"

const (
	classNameField = ".spec.className"
	infraNSField   = ".status.infrastructureNamespace"
)

// ComputePlaneReconciler drives a ComputePlane through its lifecycle stages.
type ComputePlaneReconciler struct {
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
	Shard Shard
}

// SetupOptions are the manager flags that shape the controller.
type SetupOptions struct {
	controller.Options
	// ReconcileRequests makes a change of the reconcile.fluxcd.io/requestedAt annotation
	// trigger a reconcile, as Flux's objects do.
	ReconcileRequests bool
}

// +kubebuilder:rbac:groups=computeplane.cozystack.io,resources=computeplanes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=computeplane.cozystack.io,resources=computeplanes/status,verbs=patch
// +kubebuilder:rbac:groups=computeplane.cozystack.io,resources=computeplanes/finalizers,verbs=update
// +kubebuilder:rbac:groups=computeplane.cozystack.io,resources=computeplaneclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler, its index and its watches.
func (r *ComputePlaneReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts SetupOptions) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &cpv1.ComputePlane{}, classNameField,
		func(o client.Object) []string { return []string{o.(*cpv1.ComputePlane).Spec.ClassName} }); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &cpv1.ComputePlane{}, infraNSField,
		func(o client.Object) []string { return []string{o.(*cpv1.ComputePlane).Status.InfrastructureNamespace} }); err != nil {
		return err
	}
	// A label change may move the plane between shards: both managers must look.
	own := predicate.Predicate(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))
	if opts.ReconcileRequests {
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
		WatchesRawSource(source.Kind(r.Addons, &helmv2.HelmRelease{}, handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, o *helmv2.HelmRelease) []ctrl.Request {
			return planeFromLabels(ctx, o)
		}))).
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
		WithOptions(opts.Options).
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
func (r *ComputePlaneReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
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

// phase observes one stage into the scope. It returns an error only for transient
// failures (which back off); a stage that is not done records a non-True result.
type phase func(ctx context.Context, s *scope) (ctrl.Result, error)

// step is a phase and the conditions it answers for: when the phase fails, the first
// is what could not be verified, and the others are not True either.
type step struct {
	conditions []string
	run        phase
	// plane marks the phases that talk to the plane: their failure is the plane's.
	plane bool
}

func (r *ComputePlaneReconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	steps := []step{
		{[]string{cpv1.ValidCondition}, r.reconcileValid, false},
		{[]string{cpv1.ProvisionedCondition}, r.reconcileProvisioning, false},
		{[]string{cpv1.PodSecurityCondition, cpv1.AdmissionCondition}, r.reconcileHardening, true},
		{[]string{cpv1.EgressCondition}, r.reconcileEgress, false},
		{[]string{cpv1.NetworkPoliciesCondition}, r.reconcileGrants, false},
		// After the management-side stages: they run while the plane loads new policies.
		{[]string{cpv1.AdmissionCondition}, r.reconcileEnforcement, true},
		{[]string{cpv1.IdentitiesCondition}, r.reconcileIdentities, true},
	}
	passCtx, cancel := r.passContext(ctx)
	defer cancel()
	// What each phase of the pass took, in the debug log: where a plane's time to Ready
	// goes.
	timings := make([]any, 0, 2*len(steps))
	defer func() { ctrl.LoggerFrom(ctx).V(1).Info("pass", timings...) }()
	defer func() {
		if _, said := s.results[cpv1.AdmissionCondition]; s.unproven != nil && !said {
			// The pass ended before it proved the policies it wrote in force.
			s.observe(cpv1.AdmissionCondition, stageFalse(NotEnforcedReason,
				"the policies are written and read back, not yet proven in force; looking again shortly"))
		}
	}()
	var result ctrl.Result
	for _, st := range steps {
		started := time.Now()
		res, err := st.run(passCtx, s)
		timings = append(timings, st.conditions[0], time.Since(started).String())
		if err != nil {
			err = r.overran(passCtx, err)
			// Whatever failed, the stage was not verified: it is not True, and the gate
			// closes now rather than after the backoff this error starts.
			s.failed(st.conditions, err)
			if st.plane {
				// Revocation below then does not wait on the same plane a second time.
				r.Planes.Failed(client.ObjectKeyFromObject(s.plane), err)
			}
			if rerr := r.revokeApplierCredential(ctx, s); rerr != nil {
				err = kerrors.NewAggregate([]error{err, rerr})
			}
			return ctrl.Result{}, err
		}
		result = lowestRequeue(result, res)
		if t, blocked := s.blocked(); blocked {
			// The gate is closed: the applier credential must not exist.
			if err := r.revokeApplierCredential(ctx, s); err != nil {
				return ctrl.Result{}, err
			}
			if t.invalidSpec {
				// Not retried: a change to the plane or its class starts a new reconcile.
				return ctrl.Result{}, reconcile.TerminalError(errors.New(t.message))
			}
			return result, nil
		}
		if s.waiting {
			// The phase polls for something (a plane that blipped, say) and said nothing
			// new: later phases would only fail against the same thing.
			return result, nil
		}
	}
	return result, nil
}

// passContext bounds a pass's phases. What must happen whatever the pass took (revoking
// the credential, the status patch) runs on the outer context.
func (r *ComputePlaneReconciler) passContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.PassTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, r.PassTimeout)
}

// overran says so when err comes from the pass running out of time.
func (r *ComputePlaneReconciler) overran(passCtx context.Context, err error) error {
	if !errors.Is(passCtx.Err(), context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("this pass took longer than the operator's --plane-pass-timeout (%s), the plane's API answering too slowly: %w", r.PassTimeout, err)
}

func (r *ComputePlaneReconciler) jitter() time.Duration {
	return wait.Jitter(r.RequeueInterval, 0.2)
}

func lowestRequeue(a, b ctrl.Result) ctrl.Result {
	if a.RequeueAfter == 0 || (b.RequeueAfter > 0 && b.RequeueAfter < a.RequeueAfter) {
		return b
	}
	return a
}

// scope carries one reconcile's plane, what it looked up and what each stage observed.
type scope struct {
	plane   *cpv1.ComputePlane
	class   *cpv1.ComputePlaneClass
	results map[string]stageResult
	// released is set once the finalizer is gone and the object with it.
	released bool
	// deleting says which teardown stage the plane waits on.
	deleting deletionView
	// waiting is set by a phase that polls for something that sends no event; the
	// reconcile then has not finished with this generation.
	waiting bool
	// admin is the plane's admin credential, once provisioning verified it. It never
	// leaves the operator's memory.
	admin *remote.AdminCredential
	// quiet: the plane's watches saw nothing since its last full read, which found it
	// as the operator left it; this pass reads it no further than the probe.
	quiet bool
	// read is the full read this pass makes of the plane, recorded once it is through.
	read planeRead
	// freshSecrets: Secrets are read from the API server, not recalled by version.
	freshSecrets bool
	// unproven: the hardening wrote or first read the posture this pass, and its
	// policies are not yet proven in force (reconcileEnforcement).
	unproven *unproven
}

// planeRead is a full read of a plane, for ClusterCache.Settled.
type planeRead struct {
	mark        uint64
	watched     bool
	fingerprint string
}

func (s *scope) observe(condition string, r stageResult) {
	s.results[condition] = r
}

// failed records that a phase could not finish verifying its stages: unless the phase
// already said why its first stage is not True, that stage is False with the error; a
// later stage of the same phase that it had found True is not reported (it shows as
// blocked behind the first).
func (s *scope) failed(conditions []string, err error) {
	for _, c := range conditions[1:] {
		if r, ok := s.results[c]; ok && r.status == metav1.ConditionTrue {
			delete(s.results, c)
		}
	}
	first := conditions[0]
	if r, ok := s.results[first]; ok && r.status != metav1.ConditionTrue {
		return
	}
	s.observe(first, stageFalse(cpv1.VerificationFailedReason,
		"could not be verified: %v; the gate stays closed and the operator retries with backoff", err))
}

// blocked reports the result of the first stage this reconcile found not True, if any.
func (s *scope) blocked() (stageResult, bool) {
	// Any stage this reconcile found not True closes the gate, not only the last one
	// observed: a phase observes several (hardening: Pod Security, then admission
	// policies), and a drift in the first must not hide behind the second being True.
	for _, c := range cpv1.GatingConditions {
		if r, ok := s.results[c]; ok && r.status != metav1.ConditionTrue {
			return r, true
		}
	}
	return stageResult{}, false
}

// kamajiControlPlaneKind is an empty KamajiControlPlane (its Go types cannot be a
// dependency), for watching.
func kamajiControlPlaneKind() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(render.KamajiAPIVersion)
	u.SetKind(render.KamajiControlPlaneKind)
	return u
}

// comparisons is the reconciler's memory of its management comparisons. The manager's
// cache holds some kinds as their identity alone (ContentlessKinds): a comparison reads
// a version of those it does not remember through APIReader (none: it fails).
func (r *ComputePlaneReconciler) comparisons() *ssa.Comparisons {
	r.comparedOnce.Do(func() { r.compared.Fresh, r.compared.Trimmed = r.APIReader, ContentlessKinds() })
	return &r.compared
}
