// Package netpol generates the CiliumNetworkPolicies of a ComputePlane. It is pure: no
// I/O, so every policy it produces is covered by golden-file tests (and, in the envtest
// suites, by the real Cilium CRD schema).
package netpol

import (
	"slices"
	"sort"
	"strings"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	slim_metav1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	"github.com/cilium/cilium/pkg/policy/api"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// Ports of a Kamaji control plane the plane's nodes must reach: the API server and the
// konnectivity server (which carries the API server's traffic to the nodes).
const (
	APIServerPort    = "6443"
	KonnectivityPort = "8132"
	namespaceLabel   = "k8s:io.kubernetes.pod.namespace"
	// DefaultDenyName names the always-on policy of an infrastructure namespace.
	DefaultDenyName = "computeplane-default-deny"
	// VirtLauncherLabel and VirtLauncherValue are how KubeVirt labels every VM's pod.
	VirtLauncherLabel = "kubevirt.io"
	VirtLauncherValue = "virt-launcher"
)

// BaselineName names a plane's baseline policy: per plane (name and UID), so a later
// plane in the same namespace never rewrites an earlier plane's policy and leaves its
// VMs unselected.
func BaselineName(plane string, uid string) string {
	name := "computeplane-egress-" + plane
	if u := strings.ReplaceAll(uid, "-", ""); len(u) >= 8 {
		name += "-" + u[:8]
	}
	return name
}

// Baseline is what the egress baseline needs to know about one plane.
type Baseline struct {
	// Name of the policy (BaselineName).
	Name string
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
	// DeniedCIDRs are denied whatever else allows them (the class's: the management
	// API's addresses outside the cluster), besides AlwaysDenied.
	DeniedCIDRs []string
	// Labels of the policy object itself.
	Labels map[string]string
}

// BaselinePolicy is the egress baseline of a plane's VM pods: the kube-apiserver entity
// is always denied (an explicit deny wins over any allow, including a later grant);
// allowed are DNS, the plane's own control plane (API server and konnectivity), the
// plane's other VMs (its nodes talk to each other: the plane's own pod network, kubelets)
// and, if the class says so, the world outside the cluster. Everything else cluster-internal is
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
				selector(map[string]string{namespaceLabel: b.Namespace, "k8s:" + cpv1.KamajiNameLabel: b.ControlPlane}),
			}},
			ToPorts: api.PortRules{{Ports: []api.PortProtocol{
				{Port: APIServerPort, Protocol: api.ProtoTCP}, {Port: KonnectivityPort, Protocol: api.ProtoTCP},
			}}},
		},
	}
	egress = append(egress, api.EgressRule{EgressCommonRule: api.EgressCommonRule{ToEndpoints: []api.EndpointSelector{
		selector(withNamespace(b.Namespace, b.VMSelector)),
	}}})
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
		ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: b.Name, Labels: b.Labels},
		Spec: &api.Rule{
			Description:      "ComputePlane baseline: no management kube-apiserver, no link-local, nothing cluster-internal but DNS, the plane's own control plane and its own VMs",
			EndpointSelector: selector(vm),
			Egress:           egress,
			EgressDeny:       denied(b.DeniedCIDRs),
			// Ingress (the namespace's default deny shuts the rest): the plane's own VMs,
			// its nodes talking to each other; and the host and the other nodes, where
			// KubeVirt's virt-handler (console, live migration) and the kubelet's probes
			// of the VM pods come from.
			Ingress: []api.IngressRule{
				{IngressCommonRule: api.IngressCommonRule{FromEndpoints: []api.EndpointSelector{
					selector(withNamespace(b.Namespace, b.VMSelector)),
				}}},
				{IngressCommonRule: api.IngressCommonRule{FromEntities: api.EntitySlice{api.EntityHost, api.EntityRemoteNode}}},
			},
		},
	}
	return p
}

// DefaultDeny is the always-on policy of an infrastructure namespace. It selects every
// VM pod there, puts their egress into default-deny and denies the kube-apiserver
// entity. It belongs to no plane: it is created with the namespace and
// stays while the namespace does, so a VM whose plane was deleted without its teardown,
// or whose baseline was removed, is still confined. The per-plane baselines add their
// allowances on top (Cilium enables default deny if any selecting policy asks for it).
func DefaultDeny(namespace string, labels map[string]string) *ciliumv2.CiliumNetworkPolicy {
	sel := &slim_metav1.LabelSelector{MatchLabels: map[string]string{"k8s:" + VirtLauncherLabel: VirtLauncherValue}}
	deny := true
	return &ciliumv2.CiliumNetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: ciliumv2.SchemeGroupVersion.String(), Kind: ciliumv2.CNPKindDefinition},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: DefaultDenyName, Labels: labels},
		Spec: &api.Rule{
			Description:       "ComputePlane infrastructure default deny: no VM pod here sends or receives anything but what its plane's baseline and grants allow",
			EndpointSelector:  api.EndpointSelector{LabelSelector: sel},
			EnableDefaultDeny: api.DefaultDenyConfig{Egress: &deny, Ingress: &deny},
			EgressDeny:        denied(nil),
		},
	}
}

// LinkLocal is always denied: cloud metadata services (169.254.169.254) and other
// node-local addresses.
const LinkLocal = "169.254.0.0/16"

// LinkLocalV6 is IPv6's link-local range, denied like LinkLocal: OpenStack's metadata
// service answers at fe80::a9fe:a9fe there, and on a dual-stack or IPv6 cluster a VM
// could otherwise reach the node's own link-local services.
const LinkLocalV6 = "fe80::/10"

// MetadataV6 are the clouds' IPv6 metadata endpoints, which sit in unique local
// space (fd00::/8), outside fe80::/10: each is the IPv6 twin of an address inside
// LinkLocal, so denying them keeps a dual-stack VM exactly as far from them as an
// IPv4 one. AWS: the instance metadata service (IMDS, on Nitro instances) and the EKS
// Pod Identity agent, which hands out credentials; Google Cloud: the metadata server of
// IPv6-only instances; Oracle Cloud: its metadata service; Akamai (Linode): its
// metadata service. Azure answers over IPv4 only (169.254.169.254).
var MetadataV6 = []string{
	"fd00:ec2::254/128",      // AWS IMDS
	"fd00:ec2::23/128",       // AWS EKS Pod Identity agent
	"fd20:ce::254/128",       // Google Cloud metadata server
	"fd00:c1::a9fe:a9fe/128", // Oracle Cloud metadata service
	"fd00:a9fe:a9fe::1/128",  // Akamai (Linode) metadata service
}

// AlwaysDenied are the CIDRs every policy denies whatever the class says: the
// link-local ranges of both families and the IPv6 metadata endpoints outside them.
func AlwaysDenied() []string {
	return append([]string{LinkLocal, LinkLocalV6}, MetadataV6...)
}

// denied is what a plane's VMs may never reach, whatever allows it: the kube-apiserver
// entity, the always-denied CIDRs and the given ones. (Deny rules win over allow rules
// in Cilium.)
func denied(cidrs []string) []api.EgressDenyRule {
	always := AlwaysDenied()
	blocks := make(api.CIDRSlice, 0, len(always)+len(cidrs))
	for _, c := range always {
		blocks = append(blocks, api.CIDR(c))
	}
	for _, c := range sortedUnique(cidrs) {
		if !slices.Contains(always, c) {
			blocks = append(blocks, api.CIDR(c))
		}
	}
	return []api.EgressDenyRule{
		{EgressCommonRule: api.EgressCommonRule{ToEntities: api.EntitySlice{api.EntityKubeAPIServer}}},
		{EgressCommonRule: api.EgressCommonRule{ToCIDR: blocks}},
	}
}

func sortedUnique(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return slices.Compact(out)
}

// withNamespace is a selector confined to a namespace: the namespace is set last, so a
// selector that names a namespace label of its own (a Service's selector may carry any
// key, "io.kubernetes.pod.namespace" included) cannot move it elsewhere.
func withNamespace(namespace string, labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		out["k8s:"+k] = v
	}
	out[namespaceLabel] = namespace
	return out
}

// ReservedSelectorKey reports whether a selector key means something to Cilium beyond a
// pod label (the namespace, Cilium's own identity labels): a Service selector with one
// is not granted.
func ReservedSelectorKey(key string) bool {
	return strings.HasPrefix(key, "io.kubernetes.pod.") || strings.HasPrefix(key, "io.cilium.") ||
		strings.HasPrefix(key, "k8s:") || strings.HasPrefix(key, "reserved:")
}

// selector writes the match labels as a person writes them in a policy (source prefix
// "k8s:"); Cilium's own constructors would rewrite the keys, and the agent parses these
// when it loads the policy.
func selector(matchLabels map[string]string) api.EndpointSelector {
	return api.EndpointSelector{LabelSelector: &slim_metav1.LabelSelector{MatchLabels: matchLabels}}
}
