package computeplane

import (
	"fmt"
	"testing"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// TestBlockedByAnyStage: the gate closes when any stage this reconcile observed is not
// True, whatever order the phase observed them in. A drift written back during
// hardening observes Pod Security (or the policies) Drifted and the other stage True:
// the burst found the gate left open when the True one came last.
func TestBlockedByAnyStage(t *testing.T) {
	ok := stageTrue(cpv1.SucceededReason, "fine")
	drifted := stageFalse(cpv1.DriftedReason, "drifted, restoring")
	for _, tc := range []struct {
		name    string
		observe [][2]any // condition, result, in observation order
		blocked string
	}{
		{name: "nothing observed"},
		{name: "all True", observe: [][2]any{{cpv1.PodSecurityCondition, ok}, {cpv1.AdmissionCondition, ok}}},
		{name: "first of two drifted, second True last", observe: [][2]any{{cpv1.PodSecurityCondition, drifted}, {cpv1.AdmissionCondition, ok}}, blocked: cpv1.PodSecurityCondition},
		{name: "second drifted", observe: [][2]any{{cpv1.PodSecurityCondition, ok}, {cpv1.AdmissionCondition, drifted}}, blocked: cpv1.AdmissionCondition},
		{name: "earliest stage wins", observe: [][2]any{{cpv1.IdentitiesCondition, drifted}, {cpv1.PodSecurityCondition, drifted}}, blocked: cpv1.PodSecurityCondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scope{results: map[string]stageResult{}}
			for _, o := range tc.observe {
				r := o[1].(stageResult)
				if o[0] == tc.blocked {
					r.message = o[0].(string)
				}
				s.observe(o[0].(string), r)
			}
			r, blocked := s.blocked()
			if blocked != (tc.blocked != "") || blocked && r.message != tc.blocked {
				t.Errorf("blocked = %v (%q), want %q", blocked, r.message, tc.blocked)
			}
		})
	}
}

func TestWrittenFindings(t *testing.T) {
	f := writtenFindings([]string{"ValidatingAdmissionPolicy computeplane-service-exposure",
		"ValidatingAdmissionPolicyBinding computeplane-service-exposure", "Namespace default", "ResourceQuota notebooks/computeplane"})
	if got := fmt.Sprint(f.Admission); got != "[ValidatingAdmissionPolicy computeplane-service-exposure ValidatingAdmissionPolicyBinding computeplane-service-exposure]" {
		t.Errorf("admission findings %s", got)
	}
	if got := fmt.Sprint(f.PodSecurity); got != "[Namespace default ResourceQuota notebooks/computeplane]" {
		t.Errorf("pod security findings %s", got)
	}
}
