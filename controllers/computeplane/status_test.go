package computeplane

import (
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func allTrue() map[string]stageResult {
	out := map[string]stageResult{}
	for _, t := range cpv1.GatingConditions {
		out[t] = stageTrue(cpv1.SucceededReason, "ok")
	}
	return out
}

func TestSummarize(t *testing.T) {
	type want struct {
		ready, readyReason string
		reconciling        bool
		reconcilingReason  string
		stalled            bool
		blocked            []string // stages expected Unknown/Blocked
	}
	cases := []struct {
		name     string
		prior    []metav1.Condition
		results  map[string]stageResult
		deleting bool
		stage    deletionView
		want     want
	}{
		{
			name:    "every stage true",
			results: allTrue(),
			want:    want{ready: "True", readyReason: cpv1.SucceededReason},
		},
		{
			name:    "waiting on the class",
			results: map[string]stageResult{cpv1.ValidCondition: stageFalse(cpv1.ClassNotFoundReason, "no class")},
			want: want{ready: "False", readyReason: cpv1.ClassNotFoundReason, reconciling: true,
				blocked: cpv1.GatingConditions[1:]},
		},
		{
			name: "terminal stage stalls",
			results: map[string]stageResult{
				cpv1.ValidCondition:       stageTrue(cpv1.SucceededReason, "ok"),
				cpv1.ProvisionedCondition: stageTerminal(cpv1.RenderFailedReason, "fractional cores"),
			},
			want: want{ready: "False", readyReason: cpv1.RenderFailedReason, stalled: true,
				blocked: cpv1.GatingConditions[2:]},
		},
		{
			name: "transient error keeps an earlier False stage and never turns Ready True",
			prior: []metav1.Condition{
				{Type: cpv1.ValidCondition, Status: "True", Reason: cpv1.SucceededReason},
				{Type: cpv1.ProvisionedCondition, Status: "False", Reason: "WaitingForControlPlane", Message: "tcp"},
			},
			results: map[string]stageResult{},
			want:    want{ready: "False", readyReason: "WaitingForControlPlane", reconciling: true, blocked: cpv1.GatingConditions[2:]},
		},
		{
			name:    "first reconcile cut short by an error",
			results: map[string]stageResult{},
			want:    want{ready: "False", readyReason: cpv1.ProgressingReason, reconciling: true, blocked: cpv1.GatingConditions[1:]},
		},
		{
			name:     "deleting closes the gate even when every stage is true",
			results:  allTrue(),
			deleting: true,
			want:     want{ready: "False", readyReason: cpv1.DeletingReason, reconciling: true},
		},
		{
			name:     "a teardown stage shows as Reconciling's reason",
			results:  allTrue(),
			deleting: true,
			stage:    deletionView{reason: cpv1.UninstallingPlacementReason, message: "waiting for Flux"},
			want:     want{ready: "False", readyReason: cpv1.DeletingReason, reconciling: true, reconcilingReason: cpv1.UninstallingPlacementReason},
		},
		{
			name:     "a teardown stage past its bound is Stalled, not Reconciling",
			results:  allTrue(),
			deleting: true,
			stage:    deletionView{reason: cpv1.UninstallingPlacementReason, message: "not uninstalled within 30m", stalled: cpv1.UninstallTimedOutReason},
			want:     want{ready: "False", readyReason: cpv1.DeletingReason, stalled: true},
		},
		{
			name: "a teardown stage that moves on again is no longer Stalled",
			prior: []metav1.Condition{
				{Type: cpv1.StalledCondition, Status: "True", Reason: cpv1.UninstallTimedOutReason},
			},
			results:  allTrue(),
			deleting: true,
			stage:    deletionView{reason: cpv1.RemovingIdentitiesReason, message: "the plane does not answer"},
			want:     want{ready: "False", readyReason: cpv1.DeletingReason, reconciling: true, reconcilingReason: cpv1.RemovingIdentitiesReason},
		},
		{
			name: "a stale Stalled is removed once the stage recovers",
			prior: []metav1.Condition{
				{Type: cpv1.StalledCondition, Status: "True", Reason: cpv1.SpecExceedsClassReason},
			},
			results: allTrue(),
			want:    want{ready: "True", readyReason: cpv1.SucceededReason},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conds := append([]metav1.Condition(nil), tc.prior...)
			summarize(&conds, 3, tc.results, tc.deleting, tc.stage)

			ready := apimeta.FindStatusCondition(conds, cpv1.ReadyCondition)
			if ready == nil || string(ready.Status) != tc.want.ready || ready.Reason != tc.want.readyReason {
				t.Fatalf("Ready = %+v, want %s/%s", ready, tc.want.ready, tc.want.readyReason)
			}
			if ready.ObservedGeneration != 3 {
				t.Errorf("Ready observedGeneration = %d, want 3", ready.ObservedGeneration)
			}
			if got := apimeta.IsStatusConditionTrue(conds, cpv1.ReconcilingCondition); got != tc.want.reconciling {
				t.Errorf("Reconciling = %v, want %v", got, tc.want.reconciling)
			}
			if r := tc.want.reconcilingReason; r != "" && apimeta.FindStatusCondition(conds, cpv1.ReconcilingCondition).Reason != r {
				t.Errorf("Reconciling reason = %s, want %s", apimeta.FindStatusCondition(conds, cpv1.ReconcilingCondition).Reason, r)
			}
			if got := apimeta.IsStatusConditionTrue(conds, cpv1.StalledCondition); got != tc.want.stalled {
				t.Errorf("Stalled = %v, want %v", got, tc.want.stalled)
			}
			// kstatus: Reconciling and Stalled are absent unless True.
			for _, abnormal := range []string{cpv1.ReconcilingCondition, cpv1.StalledCondition} {
				if c := apimeta.FindStatusCondition(conds, abnormal); c != nil && c.Status != metav1.ConditionTrue {
					t.Errorf("%s present with status %s", abnormal, c.Status)
				}
			}
			for _, b := range tc.want.blocked {
				c := apimeta.FindStatusCondition(conds, b)
				if c == nil || c.Status != metav1.ConditionUnknown || c.Reason != cpv1.BlockedReason {
					t.Errorf("%s = %+v, want Unknown/Blocked", b, c)
				}
			}
		})
	}
}
