package computeplane

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// Every stage that keeps objects as the operator wants them (the egress baseline, the
// grants policy, the identities in the plane and their credential, the hardening's
// posture) runs one skeleton: look, and when something differs, tell drift from a first
// rollout (on a stage that was verified, a difference is someone else's change: it is
// reported, the gate closes, and the repair comes on the next pass), respect the plane's
// drift back-off, restore, and read back. beforeRepair is its decision; converge the
// whole skeleton for the stages that fit it as it is.

// beforeRepair decides what a difference found on a stage means before anything is
// written back. drift says the stage was verified and the difference is not the
// operator's own change: then it is reported (observe sets the conditions; nil: the
// stage is False/Drifted naming what) and the phase returns. Otherwise the repair may
// go ahead, unless the plane's drift series still backs off. proceed is false when the
// phase must return res now.
func (r *Reconciler) beforeRepair(s *scope, stage string, what []string, drift bool, observe func()) (res ctrl.Result, proceed bool) {
	key := client.ObjectKeyFromObject(s.plane)
	if drift {
		if observe == nil {
			observe = func() {
				s.observe(stage, stageFalse(cpv1.DriftedReason, "%s was removed or changed; restoring", strings.Join(what, ", ")))
			}
		}
		return r.reportDrift(s, key, stage, what, observe), false
	}
	if wait := r.repairWait(key, time.Now()); wait > 0 {
		// A repeated drift backs off: the conditions it set stay, and the repair comes
		// later. A stage this pass has not said False and the status still holds True
		// (the back-off is the plane's, and another stage's drift started it) differs
		// now from what the operator wants: it must not stay True meanwhile.
		if said, ok := s.results[stage]; (!ok || said.status == metav1.ConditionTrue) &&
			apimeta.IsStatusConditionTrue(s.plane.Status.Conditions, stage) {
			r.setVerified(key, stage, false)
			s.observe(stage, stageFalse(cpv1.ProgressingReason, "%s differs from what the operator wants; restoring in %s, when the plane's drift back-off ends",
				strings.Join(what, ", "), wait.Round(time.Millisecond)))
		}
		s.waiting = true
		return ctrl.Result{RequeueAfter: wait}, false
	}
	return ctrl.Result{}, true
}

// reportDrift records a drift of a verified plane (observe sets the conditions False/
// Drifted naming what; a Warning event) and asks for the pass that restores it: at once
// the first time, later when drifts repeat, so another writer fighting the operator
// cannot turn it (and the credential the gate revokes and re-issues) into a hot loop.
func (r *Reconciler) reportDrift(s *scope, key client.ObjectKey, stage string, what []string, observe func()) ctrl.Result {
	r.setVerified(key, stage, false)
	delay, n := r.driftDelay(key, time.Now())
	msg := "The plane drifted: " + strings.Join(what, "; ")
	if n > 1 {
		msg += fmt.Sprintf(" (drift %d in a row: something keeps changing what the operator owns; restoring in %s)", n, delay.Round(time.Millisecond))
	}
	r.Events.Eventf(s.plane, nil, corev1.EventTypeWarning, cpv1.DriftedReason, "Drift", "%s", msg)
	driftRepairs.WithLabelValues(stage).Inc()
	observe()
	return ctrl.Result{RequeueAfter: max(delay, time.Millisecond)}
}

// convergence is one stage's objects, for converge.
type convergence struct {
	// stage is the condition the objects answer for.
	stage string
	// look names what differs from what the operator wants (nothing: the stage holds).
	look func(ctx context.Context) ([]string, error)
	// ownChange, when set, says a difference is the operator's own change of what it
	// wants (a grant added), not drift, even on a verified stage.
	ownChange func() bool
	// restore writes back what look found different; readBack names what still differs,
	// read from the API server itself.
	restore  func(ctx context.Context) error
	readBack func(ctx context.Context) ([]string, error)
	// notAsApplied is the stage's reason when the read-back still differs.
	notAsApplied string
}

// converge runs the skeleton for one stage. done: its objects read back as the operator
// wants them (the caller records the stage verified and says so); otherwise the stage
// said why it is not True, and the phase returns res.
func (r *Reconciler) converge(ctx context.Context, s *scope, c convergence) (res ctrl.Result, done bool, err error) {
	found, err := c.look(ctx)
	if err != nil || len(found) == 0 {
		return ctrl.Result{}, err == nil, err
	}
	key := client.ObjectKeyFromObject(s.plane)
	// The operator's own change (a grant revoked) is applied at once: the drift back-off
	// is against another writer fighting it, and a narrowing must not wait on it.
	if own := c.ownChange != nil && c.ownChange(); !own {
		drift := r.wasVerified(key, c.stage, apimeta.IsStatusConditionTrue(s.plane.Status.Conditions, c.stage))
		if res, proceed := r.beforeRepair(s, c.stage, found, drift, nil); !proceed {
			return res, false, nil
		}
	}
	if err := c.restore(ctx); err != nil {
		return ctrl.Result{}, false, err
	}
	still, err := c.readBack(ctx)
	if err != nil {
		return ctrl.Result{}, false, err
	}
	if len(still) > 0 {
		s.observe(c.stage, stageFalse(c.notAsApplied, "%s is not as applied on read-back", strings.Join(still, ", ")))
		s.waiting = true
		return ctrl.Result{RequeueAfter: r.jitter()}, false, nil
	}
	return ctrl.Result{}, true, nil
}
