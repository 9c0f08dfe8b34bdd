package netpol

import (
	"math/rand"
	"net/netip"
	"reflect"
	"strconv"
	"testing"

	"github.com/cilium/cilium/pkg/policy/api"
	"sigs.k8s.io/yaml"
)

func testGrants() Grants {
	return Grants{
		Name: GrantsName("plane", "3f2a9c1b-0000"), Namespace: "cp-tenant-a-3f2a9c1b",
		VMSelector: map[string]string{"computeplane.cozystack.io/uid": "3f2a9c1b-0000"},
		Labels:     map[string]string{"app.kubernetes.io/managed-by": "computeplane-operator"},
		Grants: []Grant{
			{Service: "postgres", Namespace: "tenant-a", Selector: map[string]string{"app": "postgres"},
				Ports: []Port{{"5432", "TCP"}}},
			{Service: "cache", Namespace: "tenant-a", Selector: map[string]string{"app": "redis", "role": "primary"},
				Ports: []Port{{"redis", "TCP"}, {"6379", "TCP"}, {"6379", "TCP"}}},
			{Service: "legacy", Namespace: "tenant-a", Ports: []Port{{"443", "TCP"}}},
		},
	}
}

func TestGrantsGolden(t *testing.T) {
	got, err := yaml.Marshal(GrantsPolicy(testGrants()))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "grants", got)
}

func TestGrantsPolicy(t *testing.T) {
	if p := GrantsPolicy(Grants{Name: "x", Namespace: "ns"}); p != nil {
		t.Error("a plane without grants has a grant policy")
	}
	if p := GrantsPolicy(Grants{Name: "x", Namespace: "ns", Grants: []Grant{{Service: "s", Namespace: "t", Selector: map[string]string{"a": "b"}}}}); p != nil {
		t.Error("a grant without ports made a policy (a rule without ports opens every port)")
	}
	p := GrantsPolicy(testGrants())
	if len(p.Spec.Egress) != 3 {
		t.Fatalf("%d rules for 3 grants", len(p.Spec.Egress))
	}
	// Ordered by Service: cache, legacy, postgres.
	if sel := p.Spec.Egress[0].ToEndpoints[0].MatchLabels; sel["k8s:app"] != "redis" || sel["k8s:io.kubernetes.pod.namespace"] != "tenant-a" {
		t.Errorf("first rule selects %v", sel)
	}
	if ports := p.Spec.Egress[0].ToPorts[0].Ports; len(ports) != 2 || ports[0].Port != "6379" || ports[1].Port != "redis" {
		t.Errorf("ports = %+v, want 6379 and redis once each", ports)
	}
	if svc := p.Spec.Egress[1].ToServices; len(svc) != 1 || svc[0].K8sService.ServiceName != "legacy" || svc[0].K8sService.Namespace != "tenant-a" {
		t.Errorf("a Service without a selector is not named: %+v", p.Spec.Egress[1])
	}
	if GrantsName("p", "3f2a9c1b-0000") != "computeplane-grants-p-3f2a9c1b" {
		t.Errorf("name = %s", GrantsName("p", "3f2a9c1b-0000"))
	}
}

// FuzzGrantsPolicy feeds the generator random grants and checks what must hold of every
// policy it makes: the kube-apiserver and link-local always denied, no rule without
// ports, every selector inside its grant's namespace, and the same policy whatever the
// order the grants come in. (Its first run found a Service selector naming
// io.kubernetes.pod.namespace moving a rule into another namespace.) `go test` runs the seeds; `go test -fuzz FuzzGrantsPolicy
// ./netpol` explores.
func FuzzGrantsPolicy(f *testing.F) {
	for _, seed := range []int64{1, 2, 3, 42, 1000} {
		f.Add(seed, uint8(seed%17))
	}
	f.Fuzz(func(t *testing.T, seed int64, n uint8) {
		r := rand.New(rand.NewSource(seed))
		g := Grants{Name: "p", Namespace: "cp-x", VMSelector: map[string]string{"uid": "u"}}
		for i := range int(n) {
			gr := Grant{Service: "svc-" + strconv.Itoa(r.Intn(int(n)+1)) + "-" + strconv.Itoa(i), Namespace: "tenant-" + strconv.Itoa(r.Intn(3))}
			if r.Intn(4) > 0 {
				gr.Selector = map[string]string{"app": strconv.Itoa(r.Intn(5)), "io.kubernetes.pod.namespace": "elsewhere"}
			}
			for range r.Intn(4) {
				gr.Ports = append(gr.Ports, Port{Port: strconv.Itoa(1 + r.Intn(65535)), Protocol: []string{"TCP", "UDP", "SCTP"}[r.Intn(3)]})
			}
			g.Grants = append(g.Grants, gr)
		}
		p := GrantsPolicy(g)
		if p == nil {
			for _, gr := range g.Grants {
				if len(gr.Ports) > 0 {
					t.Fatal("no policy although a grant has ports")
				}
			}
			return
		}
		checkDenies(t, p.Spec.EgressDeny)
		namespaces := map[string]bool{}
		for _, gr := range g.Grants {
			namespaces[gr.Namespace] = true
		}
		for _, rule := range p.Spec.Egress {
			if len(rule.ToPorts) == 0 || len(rule.ToPorts[0].Ports) == 0 {
				t.Fatalf("a rule without ports: %+v", rule)
			}
			if len(rule.ToEntities) > 0 || len(rule.ToCIDR) > 0 || len(rule.ToCIDRSet) > 0 {
				t.Fatalf("a rule to entities or CIDRs: %+v", rule)
			}
			for _, sel := range rule.ToEndpoints {
				if ns := sel.MatchLabels["k8s:io.kubernetes.pod.namespace"]; !namespaces[ns] || len(sel.MatchExpressions) > 0 {
					t.Fatalf("a selector outside its grant's namespace: %+v", sel)
				}
			}
		}
		shuffled := g
		shuffled.Grants = append([]Grant(nil), g.Grants...)
		r.Shuffle(len(shuffled.Grants), func(i, j int) { shuffled.Grants[i], shuffled.Grants[j] = shuffled.Grants[j], shuffled.Grants[i] })
		a, _ := yaml.Marshal(p)
		b, _ := yaml.Marshal(GrantsPolicy(shuffled))
		if !reflect.DeepEqual(a, b) {
			t.Fatal("the policy depends on the order of the grants")
		}
	})
}

func checkDenies(t *testing.T, deny []api.EgressDenyRule) {
	t.Helper()
	apiserver := false
	for _, d := range deny {
		for _, e := range d.ToEntities {
			apiserver = apiserver || e == api.EntityKubeAPIServer
		}
	}
	if !apiserver {
		t.Fatalf("egressDeny %+v does not deny the kube-apiserver", deny)
	}
	for _, addr := range neverReached {
		if !deniesAddr(deny, netip.MustParseAddr(addr.ip)) {
			t.Fatalf("egressDeny %+v does not deny %s (%s)", deny, addr.ip, addr.why)
		}
	}
}

// neverReached are addresses no plane's VM may reach whatever the class or grants say:
// link-local of both families and the clouds' metadata endpoints.
var neverReached = []struct{ ip, why string }{
	{"169.254.169.254", "IPv4 cloud metadata"},
	{"169.254.170.23", "AWS EKS Pod Identity agent, IPv4"},
	{"fe80::1", "IPv6 link-local"},
	{"fe80::a9fe:a9fe", "OpenStack metadata, IPv6"},
	{"febf:ffff::1", "last block of fe80::/10"},
	{"fd00:ec2::254", "AWS IMDS, IPv6"},
	{"fd00:ec2::23", "AWS EKS Pod Identity agent, IPv6"},
	{"fd20:ce::254", "Google Cloud metadata, IPv6"},
	{"fd00:c1::a9fe:a9fe", "Oracle Cloud metadata, IPv6"},
	{"fd00:a9fe:a9fe::1", "Akamai (Linode) metadata, IPv6"},
}

// deniesAddr reports whether one of the deny rules' CIDRs holds addr.
func deniesAddr(deny []api.EgressDenyRule, addr netip.Addr) bool {
	for _, d := range deny {
		for _, c := range d.ToCIDR {
			if netip.MustParsePrefix(string(c)).Contains(addr) {
				return true
			}
		}
	}
	return false
}
