package netpol

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/cilium/pkg/policy/api"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestBaselineGolden(t *testing.T) {
	base := Baseline{
		Name:      BaselineName("plane", "3f2a9c1b-0000-4000-8000-000000000001"),
		Namespace: "cp-tenant-a-3f2a9c1b",
		VMSelector: map[string]string{"computeplane.cozystack.io/name": "plane", "computeplane.cozystack.io/namespace": "tenant-a",
			"computeplane.cozystack.io/uid": "3f2a9c1b-0000-4000-8000-000000000001"},
		ControlPlane: "plane",
		Labels:       map[string]string{"computeplane.cozystack.io/name": "plane"},
	}
	withInternet := base
	withInternet.Internet = true
	withInternet.DeniedCIDRs = []string{"203.0.113.10/32", "198.51.100.0/24", "203.0.113.10/32"}
	labels := map[string]string{"app.kubernetes.io/managed-by": "computeplane-operator"}
	for name, policy := range map[string]any{
		"baseline-internet-deny":  BaselinePolicy(base),
		"baseline-internet-allow": BaselinePolicy(withInternet),
		"default-deny-dedicated":  DefaultDeny("cp-tenant-a-3f2a9c1b", labels),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := yaml.Marshal(policy)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, got)
		})
	}
}

// golden compares got with testdata/<name>.golden.yaml (go test ./netpol -update
// rewrites it).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./netpol -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file; review and run go test ./netpol -update\n--- got\n%s", name, got)
	}
}

func TestBaselineDeniesTheAPIServerEvenWithInternet(t *testing.T) {
	p := BaselinePolicy(Baseline{Namespace: "n", ControlPlane: "c", Internet: true, DeniedCIDRs: []string{"203.0.113.10/32"}})
	checkDenies(t, p.Spec.EgressDeny)
	if !deniesAddr(p.Spec.EgressDeny, netip.MustParseAddr("203.0.113.10")) {
		t.Errorf("the class's denied CIDRs are not denied: %v", p.Spec.EgressDeny)
	}
	checkDenies(t, DefaultDeny("n", nil).Spec.EgressDeny)
	for _, r := range p.Spec.Egress {
		for _, e := range r.ToEntities {
			if e == "all" || e == "cluster" || e == "kube-apiserver" || e == "host" || e == "remote-node" {
				t.Errorf("egress allows entity %q", e)
			}
		}
	}
}

func TestBaselineNamesArePerPlane(t *testing.T) {
	a, b := BaselineName("plane", "11111111-0000"), BaselineName("plane", "22222222-0000")
	if a == b {
		t.Errorf("two planes of the same name share the baseline %q", a)
	}
}

func TestDefaultDenySelectsVMsAndDeniesEgress(t *testing.T) {
	p := DefaultDeny("ns", nil)
	if p.Spec.EnableDefaultDeny.Egress == nil || !*p.Spec.EnableDefaultDeny.Egress || len(p.Spec.Egress) != 0 {
		t.Errorf("egress is not default-deny with no allowance: %+v", p.Spec)
	}
	if p.Spec.EndpointSelector.MatchLabels["k8s:kubevirt.io"] != "virt-launcher" || len(p.Spec.EndpointSelector.MatchExpressions) != 0 {
		t.Errorf("selector %+v does not select every VM pod of the namespace", p.Spec.EndpointSelector)
	}
}

func TestBaselineLetsThePlanesNodesTalk(t *testing.T) {
	p := BaselinePolicy(Baseline{Namespace: "cp-a", ControlPlane: "c", VMSelector: map[string]string{"computeplane.cozystack.io/uid": "u"}})
	for _, r := range p.Spec.Egress {
		for _, e := range r.ToEndpoints {
			if e.MatchLabels["k8s:computeplane.cozystack.io/uid"] == "u" && e.MatchLabels["k8s:io.kubernetes.pod.namespace"] == "cp-a" && len(r.ToPorts) == 0 {
				return
			}
		}
	}
	t.Errorf("the plane's VMs cannot reach each other: %+v", p.Spec.Egress)
}

// TestEveryPolicyDeniesLinkLocalAndMetadata: each kind of policy a plane's VMs are
// selected by denies link-local of both families and the IPv6 metadata endpoints, so
// no single policy (a grant, the namespace's default deny) leaves them open.
func TestEveryPolicyDeniesLinkLocalAndMetadata(t *testing.T) {
	g := testGrants()
	for name, deny := range map[string][]api.EgressDenyRule{
		"baseline":               BaselinePolicy(Baseline{Namespace: "n", ControlPlane: "c"}).Spec.EgressDeny,
		"baseline with internet": BaselinePolicy(Baseline{Namespace: "n", ControlPlane: "c", Internet: true}).Spec.EgressDeny,
		"default deny":           DefaultDeny("n", nil).Spec.EgressDeny,
		"grants":                 GrantsPolicy(g).Spec.EgressDeny,
	} {
		t.Run(name, func(t *testing.T) { checkDenies(t, deny) })
	}
}

// TestDeniedCIDRsAreListedOnce: a class that names an always-denied range again (or the
// same CIDR twice) gets it once, so the policy does not change with such a repetition.
func TestDeniedCIDRsAreListedOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		class []string
		want  int
	}{
		{"none", nil, len(AlwaysDenied())},
		{"link-local again, both families", []string{LinkLocal, LinkLocalV6}, len(AlwaysDenied())},
		{"a metadata endpoint again", []string{MetadataV6[0]}, len(AlwaysDenied())},
		{"one of the class's own, twice", []string{"203.0.113.10/32", "203.0.113.10/32"}, len(AlwaysDenied()) + 1},
		{"an IPv6 one of the class's own", []string{"2001:db8::/32"}, len(AlwaysDenied()) + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BaselinePolicy(Baseline{Namespace: "n", ControlPlane: "c", DeniedCIDRs: tc.class}).Spec.EgressDeny[1].ToCIDR
			if len(got) != tc.want {
				t.Errorf("%d CIDRs denied, want %d: %v", len(got), tc.want, got)
			}
			if got[0] != LinkLocal {
				t.Errorf("the IPv4 link-local range is not first: %v", got)
			}
		})
	}
}
