// Package netpol generates the CiliumNetworkPolicies of a ComputePlane. It is pure: no
// I/O, so every policy it produces is covered by golden-file tests (and, in the envtest
// suites, by the real Cilium CRD schema).
package netpol

import (
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	slim_metav1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	"github.com/cilium/cilium/pkg/policy/api"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Ports of a Kamaji control plane the plane's nodes must reach: the API server and the
// konnectivity server (which carries the API server's traffic to the nodes).
const (
	APIServerPort    = "6443"
	KonnectivityPort = "8132"
	namespaceLabel   = "k8s:io.kubernetes.pod.namespace"
	kamajiNameLabel  = "kamaji.clastix.io/name"
	// BaselineName names the baseline policy in the infrastructure namespace.
	BaselineName = "computeplane-egress-baseline"
)

// Baseline is what the egress baseline needs to know about one plane.
type Baseline struct {
	// Namespace where the plane's VMs (virt-launcher pods) and its Kamaji control plane
	// run: the infrastructure namespace.
	Namespace string
	// VMSelector are the labels the operator sets on the plane's VM template; the tenant
	// cannot set them, so only this plane's VM pods match.
	VMSelector map[string]string
	// ControlPlane is the TenantControlPlane's name (Kamaji labels its pods with it).
	ControlPlane string
	// Internet allows egress to addresses outside the cluster.
	Internet bool
	// Labels of the policy object itself.
	Labels map[string]string
}

// BaselinePolicy is the egress baseline of a plane's VM pods: the kube-apiserver entity
// is always denied (an explicit deny wins over any allow, including a later grant);
// allowed are DNS, the plane's own control plane (API server and konnectivity) and, if
// the class says so, the world outside the cluster. Everything else cluster-internal is
// denied by default, because a policy with egress rules selects the pods. Per-Service
// grants are separate policies that add to this one.
func BaselinePolicy(b Baseline) *ciliumv2.CiliumNetworkPolicy {
	egress := []api.EgressRule{
		{
			EgressCommonRule: api.EgressCommonRule{ToEndpoints: []api.EndpointSelector{
				selector(map[string]string{namespaceLabel: "kube-system", "k8s:k8s-app": "kube-dns"}),
			}},
			ToPorts: api.PortRules{{Ports: []api.PortProtocol{
				{Port: "53", Protocol: api.ProtoUDP}, {Port: "53", Protocol: api.ProtoTCP},
			}}},
		},
		{
			EgressCommonRule: api.EgressCommonRule{ToEndpoints: []api.EndpointSelector{
				selector(map[string]string{namespaceLabel: b.Namespace, "k8s:" + kamajiNameLabel: b.ControlPlane}),
			}},
			ToPorts: api.PortRules{{Ports: []api.PortProtocol{
				{Port: APIServerPort, Protocol: api.ProtoTCP}, {Port: KonnectivityPort, Protocol: api.ProtoTCP},
			}}},
		},
	}
	if b.Internet {
		egress = append(egress, api.EgressRule{EgressCommonRule: api.EgressCommonRule{
			ToEntities: api.EntitySlice{api.EntityWorld},
		}})
	}
	vm := map[string]string{}
	for k, v := range b.VMSelector {
		vm["k8s:"+k] = v
	}
	p := &ciliumv2.CiliumNetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: ciliumv2.SchemeGroupVersion.String(), Kind: ciliumv2.CNPKindDefinition},
		ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: BaselineName, Labels: b.Labels},
		Spec: &api.Rule{
			Description:      "ComputePlane egress baseline: no management kube-apiserver, nothing cluster-internal but DNS and the plane's own control plane",
			EndpointSelector: selector(vm),
			Egress:           egress,
			EgressDeny: []api.EgressDenyRule{{EgressCommonRule: api.EgressCommonRule{
				ToEntities: api.EntitySlice{api.EntityKubeAPIServer},
			}}},
		},
	}
	return p
}

// selector writes the match labels as a person writes them in a policy (source prefix
// "k8s:"); Cilium's own constructors would rewrite the keys, and the agent parses these
// when it loads the policy.
func selector(matchLabels map[string]string) api.EndpointSelector {
	return api.EndpointSelector{LabelSelector: &slim_metav1.LabelSelector{MatchLabels: matchLabels}}
}
