package computeplane

import (
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// deletionView is the teardown stage a deleting plane waits on, as its Reconciling
// condition shows it.
type deletionView struct {
	reason, message string
	// stalled, a reason, says the stage waited past its bound: the plane is Stalled.
	stalled string
}

// stageResult is what a phase observed about its stage. Phases only observe; the
// functions in this file turn observations into conditions.
type stageResult struct {
	status  metav1.ConditionStatus
	reason  string
	message string
	// terminal marks a result no retry can change: the plane is Stalled until its spec
	// (or its class, or the operator) changes.
	terminal bool
	// invalidSpec marks a terminal result caused by the spec itself: the reconcile ends
	// with a terminal error, so it is neither retried nor continued.
	invalidSpec bool
}

func stageTrue(reason, message string) stageResult {
	return stageResult{status: metav1.ConditionTrue, reason: reason, message: message}
}

func stageFalse(reason, format string, args ...any) stageResult {
	return stageResult{status: metav1.ConditionFalse, reason: reason, message: fmt.Sprintf(format, args...)}
}

func stageTerminal(reason, format string, args ...any) stageResult {
	r := stageFalse(reason, format, args...)
	r.terminal = true
	return r
}

func stageInvalid(reason, format string, args ...any) stageResult {
	r := stageTerminal(reason, format, args...)
	r.invalidSpec = true
	return r
}

// summarize writes this reconcile's stage results into conds, marks every later stage
// Blocked behind the first one that is not True, and derives Ready, Reconciling and
// Stalled from the stage conditions (not from the results alone, so a reconcile cut
// short by a transient error never turns Ready True). It is pure.
func summarize(conds *[]metav1.Condition, generation int64, results map[string]stageResult, deleting bool, stage deletionView) {
	for _, t := range cpv1.GatingConditions {
		if r, ok := results[t]; ok {
			set(conds, generation, t, r.status, r.reason, r.message)
		}
	}

	var blocker *metav1.Condition
	for _, t := range cpv1.GatingConditions {
		c := apimeta.FindStatusCondition(*conds, t)
		if blocker != nil {
			if _, ran := results[t]; !ran {
				set(conds, generation, t, metav1.ConditionUnknown, cpv1.BlockedReason, "Waiting for "+blocker.Type)
			}
			continue
		}
		switch {
		case c == nil:
			blocker = &metav1.Condition{Type: t, Reason: cpv1.ProgressingReason, Message: "not evaluated yet"}
		case c.Status != metav1.ConditionTrue:
			blocker = c.DeepCopy()
		}
	}

	switch {
	case deleting:
		set(conds, generation, cpv1.ReadyCondition, metav1.ConditionFalse, cpv1.DeletingReason,
			"The ComputePlane is being deleted; placement is closed")
	case blocker == nil:
		set(conds, generation, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason,
			"The plane is provisioned, hardened and read back, and its applier credential is issued")
	default:
		set(conds, generation, cpv1.ReadyCondition, metav1.ConditionFalse, blocker.Reason,
			blocker.Type+": "+blocker.Message)
	}

	stalled := false
	if blocker != nil && !deleting {
		r, ran := results[blocker.Type]
		stalled = ran && r.terminal
	}
	switch {
	case stalled:
		set(conds, generation, cpv1.StalledCondition, metav1.ConditionTrue, blocker.Reason, blocker.Message)
		apimeta.RemoveStatusCondition(conds, cpv1.ReconcilingCondition)
	case deleting && stage.stalled != "":
		set(conds, generation, cpv1.StalledCondition, metav1.ConditionTrue, stage.stalled, stage.message)
		apimeta.RemoveStatusCondition(conds, cpv1.ReconcilingCondition)
	case deleting:
		apimeta.RemoveStatusCondition(conds, cpv1.StalledCondition)
		reason, msg := cpv1.DeletingReason, "Tearing the plane down"
		if stage.reason != "" {
			reason, msg = stage.reason, stage.message
		}
		set(conds, generation, cpv1.ReconcilingCondition, metav1.ConditionTrue, reason, msg)
	case blocker != nil:
		apimeta.RemoveStatusCondition(conds, cpv1.StalledCondition)
		set(conds, generation, cpv1.ReconcilingCondition, metav1.ConditionTrue, cpv1.ProgressingReason,
			"Working on "+blocker.Type)
	default:
		apimeta.RemoveStatusCondition(conds, cpv1.StalledCondition)
		apimeta.RemoveStatusCondition(conds, cpv1.ReconcilingCondition)
	}
}

func set(conds *[]metav1.Condition, generation int64, t string, s metav1.ConditionStatus, reason, message string) {
	apimeta.SetStatusCondition(conds, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: message, ObservedGeneration: generation,
	})
}
