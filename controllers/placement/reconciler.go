package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

// FieldOwner is the field manager of what the placement controller writes.
const FieldOwner = "computeplane-placement"

// Reasons of the events on placement releases.
const (
	// HeldReason: the release waits for its plane to be Ready.
	HeldReason = "Held"
	// RoutedReason records (in memory, not as an event) that a release is
	// applied into the plane.
	RoutedReason = "Routed"
	// NotRoutedReason: the release is not routed as admission requires.
	NotRoutedReason = "NotRouted"
	// NoPlaneReason: the release's namespace has no ComputePlane.
	NoPlaneReason = "NoComputePlane"
	// UninstallHeldReason: a deleted release waits for the gate to reopen so
	// that Flux can uninstall it from the plane.
	UninstallHeldReason = "UninstallHeld"
	// NothingToUninstallReason: a deleted release's plane is gone, so nothing
	// can uninstall it any more and it is let go.
	NothingToUninstallReason = "NothingToUninstall"
)

// Reconciler keeps a namespace's placement releases in step with its
// ComputePlane's gate. Routing itself is fixed at admission (Webhook) and the
// gate is the applier credential; this controller makes the state visible (events on
// the releases, status.placement and the PlacementOpen condition on the plane) and
// makes sure a deleted release is uninstalled from the plane before it goes. It is keyed
// by namespace: requests carry the namespace and no name.
type Reconciler struct {
	client.Client
	Events events.EventRecorder
	// Shard is the set of planes whose namespaces this controller looks after.
	Shard tenancy.Shard
	// Leftovers removes from a plane what an uninstalled release left there; without it
	// no uninstalled release is let go while its plane lives.
	Leftovers Leftovers
	// RequeueInterval is how soon a release waiting on its plane's connection is looked
	// at again (jittered).
	RequeueInterval time.Duration

	mu sync.Mutex
	// told is what the controller knows of each release: what it was last told
	// (reason and cause), so each state is announced once, not on every reconcile, and
	// its last routing verdict.
	told map[types.UID]told
}

type told struct {
	namespace, state string
	// checked is the release, plane and class generation its routing was last judged
	// at, and notRouted what was found (empty: routed as required).
	checked   [3]int64
	notRouted string
}

// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=list;watch;patch

// SetupWithManager registers the controller: placement releases and ComputePlanes of a
// namespace both wake it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	toNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace()}}}
	})
	placementOnly := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[cpv1.PlacementLabel] == cpv1.PlacementLabelValue || controllerutil.ContainsFinalizer(o, cpv1.PlacementFinalizer)
	})
	return ctrl.NewControllerManagedBy(mgr).Named("placement").
		Watches(&helmv2.HelmRelease{}, toNamespace, builder.WithPredicates(placementOnly, releaseChanged{})).
		Watches(&cpv1.ComputePlane{}, toNamespace).
		// A class change can take a release's chart source away.
		Watches(&cpv1.ComputePlaneClass{}, handler.EnqueueRequestsFromMapFunc(r.namespacesOfClass)).
		WithOptions(opts).
		Complete(r)
}

// Reconcile looks at every placement release of the namespace.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Namespace
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, err
	}
	plane := tenancy.PlaneOfNamespace(planes.Items)
	if !r.Shard.Holds(plane) {
		// Another shard's manager looks after this namespace.
		return ctrl.Result{}, nil
	}
	var releases helmv2.HelmReleaseList
	if err := r.List(ctx, &releases, client.InNamespace(ns), client.MatchingLabels{cpv1.PlacementLabel: cpv1.PlacementLabelValue}); err != nil {
		return ctrl.Result{}, err
	}
	gate := gateOf(plane)
	class, err := r.classOf(ctx, plane)
	if err != nil {
		return ctrl.Result{}, err
	}
	counts := cpv1.PlacementCounts{}
	seen := map[types.UID]bool{}
	waiting := false
	for i := range releases.Items {
		hr := &releases.Items[i]
		seen[hr.UID] = true
		if err := r.release(ctx, hr, plane, class, gate, &counts, &waiting); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.forget(ns, seen)
	var res ctrl.Result
	if waiting {
		res.RequeueAfter = wait.Jitter(max(r.RequeueInterval, time.Second), 0.5)
	}
	if plane == nil {
		return res, nil
	}
	return res, r.patchStatus(ctx, plane, gate, counts)
}

// classOf is the plane's class, or an empty one (no extra source namespaces) when there
// is no plane or the class is gone.
func (r *Reconciler) classOf(ctx context.Context, plane *cpv1.ComputePlane) (*cpv1.ComputePlaneClass, error) {
	class := &cpv1.ComputePlaneClass{}
	if plane == nil {
		return class, nil
	}
	if err := r.Get(ctx, client.ObjectKey{Name: plane.Spec.ClassName}, class); err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	return class, nil
}

// namespacesOfClass wakes the namespaces whose planes use a class.
func (r *Reconciler) namespacesOfClass(ctx context.Context, o client.Object) []ctrl.Request {
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.MatchingFields{tenancy.ClassNameField: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of a class", "class", o.GetName())
		return nil
	}
	var out []ctrl.Request
	for _, p := range planes.Items {
		out = append(out, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace}})
	}
	return out
}

// release handles one placement release and counts it.
func (r *Reconciler) release(ctx context.Context, hr *helmv2.HelmRelease, plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass, g gate, counts *cpv1.PlacementCounts, waiting *bool) error {
	if !hr.DeletionTimestamp.IsZero() {
		return r.deleting(ctx, hr, plane, g, counts, waiting)
	}
	if plane == nil {
		r.tell(hr, corev1.EventTypeWarning, NoPlaneReason,
			"namespace %s has no ComputePlane: this placement release is applied nowhere until one exists (it never falls back to another plane or the management cluster)", hr.Namespace)
		return nil
	}
	notRouted, err := r.notRouted(hr, plane, class)
	if err != nil {
		return err
	}
	if notRouted != "" {
		counts.Refused++
		r.tell(hr, corev1.EventTypeWarning, NotRoutedReason,
			"does not fit ComputePlane %s (stored before the operator's webhook or its rule, or its class changed since): %s; suspended until it does: fix the release, or ask a platform operator to allow what it uses", plane.Name, notRouted)
		return r.suspend(ctx, hr, true)
	}
	if err := r.suspend(ctx, hr, false); err != nil {
		return err
	}
	if !controllerutil.ContainsFinalizer(hr, cpv1.PlacementFinalizer) {
		patch := client.MergeFromWithOptions(hr.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(hr, cpv1.PlacementFinalizer)
		if err := r.Patch(ctx, hr, patch, client.FieldOwner(FieldOwner)); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	if g.open {
		counts.Routed++
		r.routed(hr)
		return nil
	}
	counts.Held++
	r.tell(hr, corev1.EventTypeNormal, HeldReason, "held: %s; Flux applies it into the plane as soon as the plane is Ready", g.why)
	return nil
}

// deleting holds a deleted placement release until Flux has uninstalled it from the
// plane (its status.storageNamespace is cleared then, and never set for a release that
// was never installed). A suspended release is unsuspended: Flux deletes a suspended
// release without uninstalling it.
//
// A release whose namespace has no ComputePlane any more is let go: its plane went
// without the operator's teardown (deleted before the operator added its finalizer, or
// its finalizer removed by hand), so no credential or cluster is left for Flux to
// uninstall from, and the finalizer would keep the release, and its namespace, forever.
//
// Helm's uninstall leaves what the chart keeps (helm.sh/resource-policy: keep) and what
// its hooks created: once Flux has uninstalled a release from a live plane, those are
// removed too (sweep) before the release goes.
func (r *Reconciler) deleting(ctx context.Context, hr *helmv2.HelmRelease, plane *cpv1.ComputePlane, g gate, counts *cpv1.PlacementCounts, waiting *bool) error {
	if !controllerutil.ContainsFinalizer(hr, cpv1.PlacementFinalizer) {
		return nil
	}
	if g.noPlane {
		patch := client.MergeFromWithOptions(hr.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(hr, cpv1.PlacementFinalizer)
		if err := r.Patch(ctx, hr, patch, client.FieldOwner(FieldOwner)); err != nil {
			return client.IgnoreNotFound(err)
		}
		if hr.Status.StorageNamespace != "" {
			r.tell(hr, corev1.EventTypeWarning, NothingToUninstallReason,
				"deleted after its namespace's ComputePlane went without the operator's teardown: no plane is left for Flux to uninstall it from, so it is let go without its uninstall")
		}
		return nil
	}
	if hr.Spec.Suspend {
		counts.Uninstalling++
		patch := client.MergeFromWithOptions(hr.DeepCopy(), client.MergeFromWithOptimisticLock{})
		hr.Spec.Suspend = false
		return client.IgnoreNotFound(r.Patch(ctx, hr, patch, client.FieldOwner(FieldOwner)))
	}
	if hr.Status.StorageNamespace == "" {
		if !g.teardown && !r.sweep(ctx, hr, plane) {
			*waiting = true
			counts.Uninstalling++
			return nil
		}
		patch := client.MergeFromWithOptions(hr.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(hr, cpv1.PlacementFinalizer)
		return client.IgnoreNotFound(r.Patch(ctx, hr, patch, client.FieldOwner(FieldOwner)))
	}
	counts.Uninstalling++
	if !g.open && !g.teardown {
		r.tell(hr, corev1.EventTypeWarning, UninstallHeldReason,
			"deleted, and kept until Flux has uninstalled it from the plane: %s, so Flux has no credential; its objects keep running in the plane until the plane is Ready again", g.why)
	}
	return nil
}

// suspend suspends a release that does not fit its plane, so that Flux applies nothing
// of it (its credential is the plane's, shared with every release of the namespace), and
// marks it so; it resumes only a release it suspended itself, once the release fits.
func (r *Reconciler) suspend(ctx context.Context, hr *helmv2.HelmRelease, suspend bool) error {
	ours := hr.Annotations[cpv1.SuspendedAnnotation] != ""
	if suspend && hr.Spec.Suspend || !suspend && !ours {
		// Already suspended (by us, or by its owner: then it stays so), or not ours to resume.
		return nil
	}
	patch := client.MergeFromWithOptions(hr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	hr.Spec.Suspend = suspend
	if suspend {
		metav1.SetMetaDataAnnotation(&hr.ObjectMeta, cpv1.SuspendedAnnotation, NotRoutedReason)
	} else {
		delete(hr.Annotations, cpv1.SuspendedAnnotation)
	}
	return client.IgnoreNotFound(r.Patch(ctx, hr, patch, client.FieldOwner(FieldOwner)))
}

// notRouted judges a release against its plane and class, once per generation of each
// (a namespace with many releases is looked at whole on every change).
func (r *Reconciler) notRouted(hr *helmv2.HelmRelease, plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass) (string, error) {
	at := [3]int64{hr.Generation, plane.Generation, class.Generation}
	r.mu.Lock()
	t, ok := r.told[hr.UID]
	r.mu.Unlock()
	if ok && t.checked == at {
		return t.notRouted, nil
	}
	obj, err := toJSONObject(hr)
	if err != nil {
		return "", err
	}
	found := ""
	if errs := placementErrors(obj, plane, class.Spec.PlacementReleases); len(errs) > 0 {
		found = errs.ToAggregate().Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.told == nil {
		r.told = map[types.UID]told{}
	}
	t = r.told[hr.UID]
	t.namespace, t.checked, t.notRouted = hr.Namespace, at, found
	r.told[hr.UID] = t
	return found, nil
}

// toJSONObject is a release as the JSON object admission judged.
func toJSONObject(hr *helmv2.HelmRelease) (map[string]any, error) {
	b, err := json.Marshal(hr)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("decoding HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	return obj, nil
}
