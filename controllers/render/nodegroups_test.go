package render

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// kubeletRefuses reports whether the kubelet refuses to start with key in
// --node-labels: a key in the kubernetes.io or k8s.io domains (or a subdomain of
// either) that is neither in the fixed set a kubelet may set on its own Node nor in
// the kubelet.kubernetes.io or node.kubernetes.io domains. It restates
// ValidateKubeletFlags and isKubernetesLabel in k8s.io/kubernetes v1.36.3
// cmd/kubelet/app/options/options.go, with IsKubeletLabel, KubeletLabels and
// KubeletLabelNamespaces from k8s.io/kubelet v0.36.3 pkg/apis/well_known_labels.go.
func kubeletRefuses(key string) bool {
	domain, _, found := strings.Cut(key, "/")
	if !found || !(inDomain(domain, "kubernetes.io") || inDomain(domain, "k8s.io")) {
		return false
	}
	switch key {
	case corev1.LabelHostname, corev1.LabelTopologyZone, corev1.LabelTopologyRegion,
		corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion,
		corev1.LabelInstanceType, corev1.LabelInstanceTypeStable, corev1.LabelOSStable, corev1.LabelArchStable,
		"beta.kubernetes.io/os", "beta.kubernetes.io/arch":
		return false
	}
	return !inDomain(domain, corev1.LabelNamespaceSuffixKubelet) && !inDomain(domain, corev1.LabelNamespaceSuffixNode)
}

// inDomain: domain is parent or one of its subdomains.
func inDomain(domain, parent string) bool {
	return domain == parent || strings.HasSuffix(domain, "."+parent)
}

func TestKubeletRefuses(t *testing.T) {
	for key, refused := range map[string]bool{
		"node-role.kubernetes.io/worker":          true,
		"kubernetes.io/role":                      true,
		"example.k8s.io/x":                        true,
		"k8s.io/x":                                true,
		"node-restriction.kubernetes.io/x":        true,
		"kubernetes.io/hostname":                  false,
		"topology.kubernetes.io/zone":             false,
		"node.kubernetes.io/instance-type":        false,
		"node.kubernetes.io/anything":             false,
		"team.node.kubernetes.io/x":               false,
		"kubelet.kubernetes.io/x":                 false,
		"beta.kubernetes.io/arch":                 false,
		"computeplane.cozystack.io/node-group":    false,
		"notkubernetes.io/x":                      false,
		"no-domain":                               false,
		"node.cluster.x-k8s.io/managed-elsewhere": false,
	} {
		if got := kubeletRefuses(key); got != refused {
			t.Errorf("kubeletRefuses(%q) = %v, want %v", key, got, refused)
		}
	}
}

// TestNodeGroupLabelsTheKubeletAccepts: whatever roles a group has, the kubelet's
// --node-labels hold nothing the kubelet refuses (a refused label keeps the node from
// ever starting), and the roles are on the MachineDeployment's machine template, where
// Cluster API takes them to the Nodes.
func TestNodeGroupLabelsTheKubeletAccepts(t *testing.T) {
	render := func(roles []string) NodeGroup {
		g := cpv1.NodeGroup{MinReplicas: 1, MaxReplicas: 1, InstanceType: "u1.medium", Roles: roles}
		groups, err := NodeGroups(testPlane(map[string]cpv1.NodeGroup{"w": g}), testClass(), "v1.33.4")
		if err != nil {
			t.Fatal(err)
		}
		return groups[0]
	}
	noRoles := render(nil)
	for _, tc := range []struct {
		name  string
		roles []string
	}{
		{"no roles", nil},
		{"one role", []string{"worker"}},
		{"several roles", []string{"worker", "gpu", "ingress"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ng := render(tc.roles)
			// Roles are labels CAPI changes in place: they never rename a template (which
			// would roll every node of the group).
			if ng.BootstrapTemplate.Name != noRoles.BootstrapTemplate.Name || ng.MachineTemplate.GetName() != noRoles.MachineTemplate.GetName() {
				t.Errorf("roles renamed a template: %s, %s", ng.BootstrapTemplate.Name, ng.MachineTemplate.GetName())
			}
			for _, arg := range ng.BootstrapTemplate.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs {
				if arg.Name != "node-labels" {
					continue
				}
				for _, kv := range strings.Split(*arg.Value, ",") {
					key, _, _ := strings.Cut(kv, "=")
					if kubeletRefuses(key) {
						t.Errorf("--node-labels holds %q, which the kubelet refuses", key)
					}
				}
				if *arg.Value != cpv1.NodeGroupLabel+"=w" {
					t.Errorf("--node-labels = %q, want the node group only", *arg.Value)
				}
			}
			md := ng.MachineDeployment
			for _, r := range tc.roles {
				if v, ok := md.Spec.Template.Labels["node-role.kubernetes.io/"+r]; !ok || v != "" {
					t.Errorf("role %q is not on the machine template: %v", r, md.Spec.Template.Labels)
				}
			}
			for k, v := range md.Spec.Selector.MatchLabels {
				if md.Spec.Template.Labels[k] != v {
					t.Errorf("the machine template no longer matches the selector at %s: %v", k, md.Spec.Template.Labels)
				}
			}
			for k := range md.Labels {
				if strings.HasPrefix(k, NodeRoleLabelPrefix) {
					t.Errorf("the MachineDeployment itself carries role label %q", k)
				}
			}
		})
	}
}
