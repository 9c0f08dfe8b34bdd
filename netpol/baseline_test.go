package netpol

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestBaselineGolden(t *testing.T) {
	base := Baseline{
		Namespace:    "cp-tenant-a",
		VMSelector:   map[string]string{"computeplane.cozystack.io/name": "plane", "computeplane.cozystack.io/namespace": "tenant-a"},
		ControlPlane: "plane",
		Labels:       map[string]string{"computeplane.cozystack.io/name": "plane"},
	}
	withInternet := base
	withInternet.Internet = true
	for name, in := range map[string]Baseline{"baseline-internet-deny": base, "baseline-internet-allow": withInternet} {
		t.Run(name, func(t *testing.T) {
			got, err := yaml.Marshal(BaselinePolicy(in))
			if err != nil {
				t.Fatal(err)
			}
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
		})
	}
}

func TestBaselineDeniesTheAPIServerEvenWithInternet(t *testing.T) {
	p := BaselinePolicy(Baseline{Namespace: "n", ControlPlane: "c", Internet: true})
	if len(p.Spec.EgressDeny) != 1 || len(p.Spec.EgressDeny[0].ToEntities) != 1 || p.Spec.EgressDeny[0].ToEntities[0] != "kube-apiserver" {
		t.Errorf("egressDeny = %+v", p.Spec.EgressDeny)
	}
	for _, r := range p.Spec.Egress {
		for _, e := range r.ToEntities {
			if e == "all" || e == "cluster" || e == "kube-apiserver" || e == "host" || e == "remote-node" {
				t.Errorf("egress allows entity %q", e)
			}
		}
	}
}
