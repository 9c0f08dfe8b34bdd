package computeplane

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/remote"
)

// TestConvergeDuringBackoff: the drift back-off is the plane's, so another stage's drift
// (the identities, say) starts it while the grants stage is True. The operator's own
// change of that stage (a grant revoked) is applied at once, not after the back-off; and
// a difference that does wait never leaves its stage True. The attack it closes: a
// tenant's VMs keep reaching a Service whose grant was revoked, for up to the back-off
// (minutes after repeated drifts), while NetworkPoliciesReady says True.
func TestConvergeDuringBackoff(t *testing.T) {
	const stage = cpv1.NetworkPoliciesCondition
	for _, tc := range []struct {
		name string
		// status is the stage as the plane's status holds it; verified what the
		// reconciler remembers of it.
		status   metav1.ConditionStatus
		verified bool
		own      bool
		// want: restore ran; else the stage this pass says (empty: nothing said).
		restored bool
		said     metav1.ConditionStatus
	}{
		{name: "own change on a verified True stage is applied at once", status: metav1.ConditionTrue, verified: true, own: true, restored: true},
		{name: "a difference that waits turns a True stage False", status: metav1.ConditionTrue, verified: false, said: metav1.ConditionFalse},
		{name: "a stage already False keeps what its drift report said", status: metav1.ConditionFalse, verified: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "p"}}
			p.Status.Conditions = []metav1.Condition{{Type: stage, Status: tc.status, Reason: "R"}}
			key := client.ObjectKeyFromObject(p)
			r := &Reconciler{Planes: &remote.ClusterCache{}}
			r.setVerified(key, stage, tc.verified)
			r.state.with(key, func(s *planeState) { s.drifts.notBefore = time.Now().Add(time.Minute) })

			s := &scope{plane: p, results: map[string]stageResult{}}
			restored := false
			c := convergence{
				stage:     stage,
				look:      func(context.Context) ([]string, error) { return []string{"CiliumNetworkPolicy t/grants"}, nil },
				ownChange: func() bool { return tc.own },
				restore:   func(context.Context) error { restored = true; return nil },
				readBack:  func(context.Context) ([]string, error) { return nil, nil },
			}
			_, done, err := r.converge(context.Background(), s, c)
			if err != nil {
				t.Fatal(err)
			}
			if restored != tc.restored || done != tc.restored {
				t.Errorf("restored=%v done=%v, want %v", restored, done, tc.restored)
			}
			said, ok := s.results[stage]
			switch {
			case tc.said == "" && ok:
				t.Errorf("the pass said %s %s (%s), want nothing", said.status, said.reason, said.message)
			case tc.said != "" && (!ok || said.status != tc.said):
				t.Errorf("the pass said %+v, want %s", said, tc.said)
			}
			if !tc.restored && !s.waiting {
				t.Error("a stage that waits on the back-off must leave the pass waiting")
			}
		})
	}
}
