package posture

import (
	"errors"
	"testing"
)

// TestCanaryRefusedBy: a canary's refusal proves its own policy in force, and nothing else
// does: not another policy's refusal, not an authorization or not-found error, not a
// refusal that merely names the policy's prefix.
func TestCanaryRefusedBy(t *testing.T) {
	canaries := map[string]Canary{}
	for _, c := range testPosture().Canaries(nil) {
		canaries[c.Policy] = c
	}
	pod, ok := canaries["computeplane-pod-hardening"]
	if !ok {
		t.Fatalf("no pod-hardening canary among %v", canaries)
	}
	exposure, ok := canaries["computeplane-service-exposure"]
	if !ok {
		t.Fatalf("no service-exposure canary among %v", canaries)
	}
	for _, tc := range []struct {
		name   string
		canary Canary
		err    string
		want   bool
	}{
		{"its own policy", exposure, `services "computeplane-canary" is forbidden: ValidatingAdmissionPolicy 'computeplane-service-exposure' with binding 'computeplane-service-exposure' denied request: NodePort Services are not allowed`, true},
		{"another policy", exposure, `services "computeplane-canary" is forbidden: ValidatingAdmissionPolicy 'computeplane-pod-hardening' with binding 'computeplane-pod-hardening' denied request`, false},
		{"a policy whose name it prefixes", exposure, `ValidatingAdmissionPolicy 'computeplane-service-exposure-extra' denied request`, false},
		{"RBAC", exposure, `services is forbidden: User "computeplane:admission-canary" cannot create resource "services"`, false},
		{"not found", exposure, `namespaces "computeplane-system" not found`, false},
		{"Pod Security, for the pod canary", pod, `pods "computeplane-canary" is forbidden: violates PodSecurity "restricted:v1.33": host namespaces (hostNetwork=true)`, true},
		{"Pod Security, for another canary", exposure, `violates PodSecurity "restricted:v1.33": host namespaces`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.canary.RefusedBy(errors.New(tc.err)); got != tc.want {
				t.Errorf("%s.RefusedBy(%q) = %t, want %t", tc.canary.Policy, tc.err, got, tc.want)
			}
		})
	}
}
