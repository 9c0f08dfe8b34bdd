package remote

import (
	"strings"
	"testing"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"

	"github.com/cozystack/computeplane/remote/posture"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/cozystack/computeplane/ssa"
)

// TestRevokedObjects: closing the gate removes the applier's right to impersonate first
// (its writes stop once the plane's RBAC cache sees that: its ServiceAccount's deletion
// would leave a token authenticating from the apiserver's token cache for up to 10 s),
// then the applier, then the deployers (whose UID every token issued for them names).
func TestRevokedObjects(t *testing.T) {
	for _, tc := range []struct {
		namespaces []string
		want       string
	}{
		{nil, "ServiceAccount computeplane-system/computeplane-applier"},
		{[]string{"tenant-b", "tenant-a"}, "RoleBinding tenant-a/computeplane-applier,RoleBinding tenant-b/computeplane-applier," +
			"ServiceAccount computeplane-system/computeplane-applier," +
			"ServiceAccount tenant-a/computeplane-deployer,ServiceAccount tenant-b/computeplane-deployer"},
	} {
		var got []string
		for _, o := range revokedObjects(tc.namespaces) {
			got = append(got, describe(o))
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("revokedObjects(%v) = %v, want %s", tc.namespaces, got, tc.want)
		}
	}
}

// TestDeployerAutomountIsCompared: a deployer ServiceAccount that mounts its token again
// (the field set to true, or removed: the default is true) is not as the operator wrote
// it, so the identities stage reports and repairs it; as written it matches, so a plane
// at rest costs no write.
func TestDeployerAutomountIsCompared(t *testing.T) {
	var want *corev1.ServiceAccount
	for _, o := range posture.Identities([]string{"tenant-a"}, []string{"tenant-a"}, false, map[string]string{"computeplane.cozystack.io/name": "p"}) {
		if sa, ok := o.(*corev1.ServiceAccount); ok && sa.Name == cpv1.DeployerName {
			want = sa
		}
	}
	if want == nil {
		t.Fatal("no deployer ServiceAccount")
	}
	if a := want.AutomountServiceAccountToken; a == nil || *a {
		t.Fatalf("the deployer mounts its token by default (%v)", a)
	}
	wantMap := asMapOf(t, want)
	for _, tc := range []struct {
		name      string
		automount *bool
		match     bool
	}{
		{"as written", ptr.To(false), true},
		{"set to true", ptr.To(true), false},
		{"removed", nil, false},
	} {
		live := want.DeepCopy()
		live.UID, live.ResourceVersion = "u1", "7"
		live.AutomountServiceAccountToken = tc.automount
		if got := ssa.Matches(asMapOf(t, live), wantMap, posture.ExactFields(want)...); got != tc.match {
			t.Errorf("%s: ssa.Matches = %v, want %v", tc.name, got, tc.match)
		}
	}
}

func asMapOf(t *testing.T, sa *corev1.ServiceAccount) map[string]any {
	t.Helper()
	u, err := ssa.ApplyObject(sa)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ssa.Normalized(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
