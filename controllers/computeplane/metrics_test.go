package computeplane

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// t0 is the clock of the tables below: cond(type, status, s) is a condition that last
// changed s seconds after t0, and they are judged at now, 100 s after t0.
var (
	t0   = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now  = t0.Add(100 * time.Second)
	T, F = metav1.ConditionTrue, metav1.ConditionFalse
)

func cond(typ string, st metav1.ConditionStatus, s int) metav1.Condition {
	return metav1.Condition{Type: typ, Status: st, LastTransitionTime: metav1.NewTime(t0.Add(time.Duration(s) * time.Second)), Reason: "R"}
}

func TestStageTimes(t *testing.T) {
	cases := []struct {
		name          string
		before, after []metav1.Condition
		want          map[string]time.Duration
	}{{
		name:   "first stage: from the plane's creation",
		before: nil,
		after:  []metav1.Condition{cond(cpv1.ValidCondition, T, 100)},
		want:   map[string]time.Duration{cpv1.ValidCondition: 100 * time.Second},
	}, {
		name:   "a stage blocked behind the one before is charged from when that one became True",
		before: []metav1.Condition{cond(cpv1.ValidCondition, T, 10), cond(cpv1.ProvisionedCondition, F, 1)},
		after:  []metav1.Condition{cond(cpv1.ValidCondition, T, 10), cond(cpv1.ProvisionedCondition, T, 100)},
		want:   map[string]time.Duration{cpv1.ProvisionedCondition: 90 * time.Second},
	}, {
		name: "drift: from when the stage went False",
		before: []metav1.Condition{cond(cpv1.ValidCondition, T, 1), cond(cpv1.ProvisionedCondition, T, 2),
			cond(cpv1.PodSecurityCondition, F, 97)},
		after: []metav1.Condition{cond(cpv1.ValidCondition, T, 1), cond(cpv1.ProvisionedCondition, T, 2),
			cond(cpv1.PodSecurityCondition, T, 100)},
		want: map[string]time.Duration{cpv1.PodSecurityCondition: 3 * time.Second},
	}, {
		name:   "two stages in one reconcile: the second took no time of its own",
		before: []metav1.Condition{cond(cpv1.ValidCondition, T, 1), cond(cpv1.ProvisionedCondition, F, 50), cond(cpv1.PodSecurityCondition, F, 50)},
		after:  []metav1.Condition{cond(cpv1.ValidCondition, T, 1), cond(cpv1.ProvisionedCondition, T, 100), cond(cpv1.PodSecurityCondition, T, 100)},
		want:   map[string]time.Duration{cpv1.ProvisionedCondition: 50 * time.Second, cpv1.PodSecurityCondition: 0},
	}, {
		name:   "nothing became True",
		before: []metav1.Condition{cond(cpv1.ValidCondition, T, 1), cond(cpv1.ProvisionedCondition, F, 50)},
		after:  []metav1.Condition{cond(cpv1.ValidCondition, T, 1), cond(cpv1.ProvisionedCondition, F, 50)},
		want:   map[string]time.Duration{},
	}, {
		name:   "a stage after one that is not True is not counted",
		before: []metav1.Condition{cond(cpv1.ValidCondition, F, 1)},
		after:  []metav1.Condition{cond(cpv1.ValidCondition, F, 1), cond(cpv1.ProvisionedCondition, T, 100)},
		want:   map[string]time.Duration{},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := stageTimes(tc.before, tc.after, t0, now); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("stageTimes = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestProvisionedReadyTime(t *testing.T) {
	cases := []struct {
		name          string
		before, after []metav1.Condition
		want          time.Duration
		ok            bool
	}{{
		name:   "bring-up",
		before: []metav1.Condition{cond(cpv1.ReadyCondition, F, 0), cond(cpv1.ProvisionedCondition, T, 60)},
		after:  []metav1.Condition{cond(cpv1.ReadyCondition, T, 100), cond(cpv1.ProvisionedCondition, T, 60)},
		want:   40 * time.Second, ok: true,
	}, {
		name:   "a repair of a long-provisioned plane is no bring-up",
		before: []metav1.Condition{cond(cpv1.ReadyCondition, F, 90), cond(cpv1.ProvisionedCondition, T, 5)},
		after:  []metav1.Condition{cond(cpv1.ReadyCondition, T, 100), cond(cpv1.ProvisionedCondition, T, 5)},
	}, {
		name:   "already Ready",
		before: []metav1.Condition{cond(cpv1.ReadyCondition, T, 90), cond(cpv1.ProvisionedCondition, T, 5)},
		after:  []metav1.Condition{cond(cpv1.ReadyCondition, T, 90), cond(cpv1.ProvisionedCondition, T, 5)},
	}, {
		name:   "not Ready",
		before: []metav1.Condition{cond(cpv1.ReadyCondition, F, 0)},
		after:  []metav1.Condition{cond(cpv1.ReadyCondition, F, 0), cond(cpv1.ProvisionedCondition, T, 60)},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := provisionedReadyTime(tc.before, tc.after, now)
			if got != tc.want || ok != tc.ok {
				t.Errorf("provisionedReadyTime = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestSummarizeFleet(t *testing.T) {
	planes := []cpv1.ComputePlane{{Status: cpv1.ComputePlaneStatus{
		Conditions: []metav1.Condition{{Type: cpv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: cpv1.SucceededReason}},
		Placement:  &cpv1.PlacementCounts{Routed: 3, Uninstalling: 1},
		ServiceAccess: []cpv1.ServiceAccessStatus{
			{Name: "db", State: cpv1.GrantGranted}, {Name: "cache", State: cpv1.GrantPending}},
	}}, {Status: cpv1.ComputePlaneStatus{
		Conditions: []metav1.Condition{{Type: cpv1.ReadyCondition, Status: metav1.ConditionFalse, Reason: cpv1.DriftedReason}},
		Placement:  &cpv1.PlacementCounts{Held: 2},
	}}, {Status: cpv1.ComputePlaneStatus{
		Conditions: []metav1.Condition{{Type: cpv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: cpv1.SucceededReason}},
	}}}
	got := summarizeFleet(planes)
	wantConds := map[conditionKey]int{
		{cpv1.ReadyCondition, "True", cpv1.SucceededReason}: 2,
		{cpv1.ReadyCondition, "False", cpv1.DriftedReason}:  1,
	}
	if !reflect.DeepEqual(got.conditions, wantConds) {
		t.Errorf("conditions = %v, want %v", got.conditions, wantConds)
	}
	if want := map[string]int32{"held": 2, "routed": 3, "refused": 0, "uninstalling": 1}; !reflect.DeepEqual(got.releases, want) {
		t.Errorf("releases = %v, want %v", got.releases, want)
	}
	if want := map[string]int{"Granted": 1, "Pending": 1, "Refused": 0}; !reflect.DeepEqual(got.grants, want) {
		t.Errorf("grants = %v, want %v", got.grants, want)
	}
}
