package computeplane

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
)

// deletionStage tears down one concern. run reports what it waits on while it is not
// done, and errors only for transient failures. abandon, when a platform operator set
// the abandon annotation, gives up what the stage waits for and says what was
// abandoned; a stage without it never waits on anything outside the operator's hands.
type deletionStage struct {
	reason  string
	run     func(ctx context.Context, s *scope) (stageWait, error)
	abandon func(ctx context.Context, s *scope) (string, error)
	// credential marks the stages during which an applier credential may exist (issued
	// before the delete, or for Flux's uninstall): when one fails, the credential is
	// revoked, as a failed phase closes the gate outside teardown.
	credential bool
}

// stageWait is what a teardown stage found: done, or what it waits on (message).
// stalled, a reason, says the stage waited past its bound: no retry of the operator's
// gets it further, only what the message asks of a person, or an abandon.
type stageWait struct {
	done    bool
	message string
	stalled string
}

// reconcileDelete runs the teardown stages in order (disable, then deprovision), one
// visible step at a time (Reconciling's reason names the stage, its message what it waits
// on and for how long), and releases the finalizer only after the last. The gate is
// closed first of all: the status patch writes Ready=False/Deleting before any stage
// removes anything, and admission takes no new placement release for a plane being
// deleted. Each stage looks at the live state, so a restarted operator resumes where
// the teardown is.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.plane
	if !controllerutil.ContainsFinalizer(p, cpv1.ComputePlaneFinalizer) {
		return ctrl.Result{}, nil
	}
	stages := []deletionStage{
		{cpv1.ProtectedReason, r.protectedByReleases, abandonNothing("the protection of the placement releases still running (they are deleted now, and their uninstall abandoned if it cannot finish)"), true},
		{cpv1.UninstallingPlacementReason, r.uninstallPlacement, r.abandonPlacement, true},
		{cpv1.RemovingIdentitiesReason, r.removeIdentities, abandonNothing("the plane's deployers, applier and placement namespaces (the plane goes with its Cluster)"), false},
		{cpv1.RemovingEgressReason, r.deleteEgressPolicies, nil, false},
		{cpv1.DeletingAddonsReason, r.deleteAddons, abandonNothing("the system add-on releases still being deleted"), false},
		{cpv1.DeletingClusterReason, r.deleteCluster, abandonNothing("the Cluster, still being deleted by Cluster API, with whatever it has not removed"), false},
		{cpv1.DeletingLeftoversReason, r.deleteLeftovers, abandonNothing("infrastructure objects still being deleted"), false},
		{cpv1.DeletingNamespaceReason, r.deleteInfraNamespace, nil, false},
	}
	why := p.Annotations[cpv1.AbandonAnnotation]
	// The teardown never goes back: a stage it has reached (recorded in the status, and
	// in memory for when the cached status lags) is where it resumes; earlier stages
	// are done, and some of them could not even look again (the plane's API is gone
	// once its Cluster is).
	key := client.ObjectKeyFromObject(p)
	start := r.teardownProgress(key)
	for i, st := range stages {
		if d := p.Status.Deletion; d != nil && d.Stage == st.reason {
			start = max(start, i)
		}
	}
	passCtx, cancel := r.passContext(ctx)
	defer cancel()
	for i, st := range stages {
		if i < start {
			continue
		}
		w, err := st.run(passCtx, s)
		if err != nil {
			err = r.overran(passCtx, err)
			if st.credential {
				if rerr := r.revokeApplierCredential(ctx, s); rerr != nil {
					err = kerrors.NewAggregate([]error{err, rerr})
				}
			}
			return ctrl.Result{}, err
		}
		if w.done {
			continue
		}
		msg := w.message
		if why != "" && st.abandon != nil {
			what, err := st.abandon(passCtx, s)
			if err != nil {
				return ctrl.Result{}, r.overran(passCtx, err)
			}
			r.Events.Eventf(p, nil, corev1.EventTypeWarning, "Abandoned", "Teardown",
				"Teardown went past %s (%s), as %s=%q says: abandoned %s", st.reason, msg, cpv1.AbandonAnnotation, why, what)
			continue
		}
		since := metav1.NewTime(stageSince(p, st.reason))
		p.Status.Deletion = &cpv1.DeletionStatus{Stage: st.reason, Since: since}
		r.recordTeardownProgress(key, i)
		s.deleting = deletionView{reason: st.reason, message: fmt.Sprintf("%s (%s so far)", msg, waited(since.Time)), stalled: w.stalled}
		if st.abandon != nil {
			s.deleting.message += fmt.Sprintf(". If it cannot finish, a platform operator may accept leaving it behind: kubectl annotate -n %s computeplane/%s %s=<why>",
				p.Namespace, p.Name, cpv1.AbandonAnnotation)
		}
		return ctrl.Result{RequeueAfter: r.jitter()}, nil
	}

	return ctrl.Result{}, r.release(ctx, s)
}

// release ends the teardown: the applier Secret is gone (revoked in an earlier stage),
// so goes the operator's right on Secrets in the tenant namespace (its watch there
// first), then the finalizer, and everything this process remembers of the plane.
func (r *Reconciler) release(ctx context.Context, s *scope) error {
	p := s.plane
	key := client.ObjectKeyFromObject(p)
	r.secretVersions.forget(key)
	if err := r.dropRights(ctx, secretRights, p.Namespace); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(p, cpv1.ComputePlaneFinalizer)
	if err := r.Patch(ctx, p, patch, client.FieldOwner(FieldOwner)); err != nil {
		return client.IgnoreNotFound(err)
	}
	s.released = true
	r.forgetPlane(key)
	return nil
}

// teardownProgress is the furthest teardown stage this process saw the plane wait on.
func (r *Reconciler) teardownProgress(key client.ObjectKey) (i int) {
	r.state.peek(key, func(s *planeState) {
		if s != nil && s.tearingDown {
			i = s.teardownStage
		}
	})
	return i
}

// recordTeardownProgress remembers that the plane's teardown reached stage i (forgetPlane
// forgets it).
func (r *Reconciler) recordTeardownProgress(key client.ObjectKey, i int) {
	r.state.with(key, func(s *planeState) {
		s.teardownStage = max(s.teardownStage, i)
		s.tearingDown = true
	})
}

// waited says how long a stage has waited, in whole minutes, so the message (and the
// status) changes at most once a minute.
func waited(since time.Time) string {
	d := time.Since(since)
	if d < time.Minute {
		return "less than a minute"
	}
	return d.Truncate(time.Minute).String()
}

func abandonNothing(what string) func(context.Context, *scope) (string, error) {
	return func(context.Context, *scope) (string, error) { return what, nil }
}

// planeSelector selects this plane's objects, not an earlier plane's of the same name.
func (s *scope) planeSelector() client.MatchingLabels {
	return client.MatchingLabels(render.PlaneSelector(s.plane))
}
