package netpol

import (
	"sort"
	"strings"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	"github.com/cilium/cilium/pkg/policy/api"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Grant is one granted Service, as its policy rule needs it: where its backends are
// (the Service's namespace and selector) and their ports. Grants are decided elsewhere;
// this package only turns them into policy.
type Grant struct {
	// Service is the Service's name (rules are ordered by it).
	Service string
	// Namespace is the Service's namespace: the plane's tenant namespace.
	Namespace string
	// Selector is the Service's selector. Empty only for a Service without one (when
	// the class allows such Services): the rule then names the Service itself and Cilium
	// follows its endpoints.
	Selector map[string]string
	// Ports are the backend ports: a Service port's targetPort (a number, or a
	// container port's name), and its protocol.
	Ports []Port
}

// Port is one backend port.
type Port struct {
	Port     string
	Protocol string
}

// Grants is what the grant policy of one plane needs.
type Grants struct {
	// Name and Namespace of the policy: where the plane's VMs run.
	Name, Namespace string
	// VMSelector are the labels the operator sets on the plane's VMs.
	VMSelector map[string]string
	// Labels of the policy object.
	Labels map[string]string
	// Grants, in any order.
	Grants []Grant
}

// GrantsName names a plane's grant policy (per plane, like its baseline).
func GrantsName(plane, uid string) string {
	return strings.Replace(BaselineName(plane, uid), "computeplane-egress-", "computeplane-grants-", 1)
}

// GrantsPolicy is one policy for all of a plane's grants, one egress rule per granted
// Service: its backends (by the Service's own selector, in its namespace, never
// another's) on exactly the granted ports. One policy per plane, not per grant: the
// policy set is then always exactly the current grants, in one object that is written,
// read back and revoked whole (revoking a grant is one update, not a delete among
// many), and it fits the 1,000 grants a plane may hold. The kube-apiserver entity and
// the always-denied addresses (AlwaysDenied) are denied here too. With no grant there
// is no policy: nil.
func GrantsPolicy(g Grants) *ciliumv2.CiliumNetworkPolicy {
	if !slicesContainsPorts(g.Grants) {
		return nil
	}
	grants := append([]Grant(nil), g.Grants...)
	sort.Slice(grants, func(i, j int) bool { return grants[i].Service < grants[j].Service })
	egress := make([]api.EgressRule, 0, len(grants))
	for _, gr := range grants {
		if len(gr.Ports) == 0 {
			continue // a rule without ports would open every port
		}
		rule := api.EgressRule{ToPorts: api.PortRules{{Ports: portProtocols(gr.Ports)}}}
		if len(gr.Selector) == 0 {
			rule.ToServices = []api.Service{{K8sService: &api.K8sServiceNamespace{ServiceName: gr.Service, Namespace: gr.Namespace}}}
		} else {
			rule.ToEndpoints = []api.EndpointSelector{selector(withNamespace(gr.Namespace, gr.Selector))}
		}
		egress = append(egress, rule)
	}
	vm := map[string]string{}
	for k, v := range g.VMSelector {
		vm["k8s:"+k] = v
	}
	return &ciliumv2.CiliumNetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: ciliumv2.SchemeGroupVersion.String(), Kind: ciliumv2.CNPKindDefinition},
		ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: g.Name, Labels: g.Labels},
		Spec: &api.Rule{
			Description:      "ComputePlane Service grants: each granted Service's backends, on the granted ports only",
			EndpointSelector: selector(vm),
			Egress:           egress,
			EgressDeny:       denied(nil),
		},
	}
}

func portProtocols(ports []Port) []api.PortProtocol {
	sorted := append([]Port(nil), ports...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Port != sorted[j].Port {
			return sorted[i].Port < sorted[j].Port
		}
		return sorted[i].Protocol < sorted[j].Protocol
	})
	out := make([]api.PortProtocol, 0, len(sorted))
	for i, p := range sorted {
		if i > 0 && p == sorted[i-1] {
			continue
		}
		out = append(out, api.PortProtocol{Port: p.Port, Protocol: api.L4Proto(p.Protocol)})
	}
	return out
}

func slicesContainsPorts(grants []Grant) bool {
	for _, g := range grants {
		if len(g.Ports) > 0 {
			return true
		}
	}
	return false
}
