package posture

import (
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// Names of the identities the operator creates in a plane.
const (
	// ApplierName is the identity in the applier kubeconfig: it may do nothing but
	// impersonate the deployers.
	ApplierName = "computeplane-applier"
	// ApplierNamespace is the operator-owned namespace of the applier in the plane.
	ApplierNamespace = "computeplane-system"
)

var rw = []string{"get", "list", "watch", "create", "update", "patch", "delete"}
var ro = []string{"get", "list", "watch"}

// DeployerRules is the one table of what a deployer may do in its target namespaces:
// what a Helm chart needs (workloads, services, configuration, ingress, their status
// reads, Helm's release Secrets, namespaced RBAC for the chart's own service accounts)
// and nothing cluster-scoped. Roles and RoleBindings are safe to grant without
// escalate or bind: the apiserver refuses a Role granting more than the deployer holds.
// pods/exec is added only when the class allows it.
func DeployerRules(podExec bool) []rbacv1.PolicyRule {
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "services", "serviceaccounts", "persistentvolumeclaims", "pods"}, Verbs: rw},
		{APIGroups: []string{""}, Resources: []string{"pods/log", "endpoints", "events", "resourcequotas", "limitranges"}, Verbs: ro},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets", "daemonsets", "replicasets"}, Verbs: rw},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: rw},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses", "networkpolicies"}, Verbs: rw},
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: rw},
		{APIGroups: []string{"autoscaling"}, Resources: []string{"horizontalpodautoscalers"}, Verbs: rw},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: rw},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: ro},
	}
	if podExec {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}})
	}
	return rules
}

// Identities are the deployer and applier objects of one plane: the applier's
// ServiceAccount; per deployer namespace (the namespaces named like the
// HelmReleases' namespaces) a deployer ServiceAccount and the applier's right to
// impersonate exactly it; per target namespace a Role with DeployerRules bound to
// every deployer that may target it.
func Identities(deployerNamespaces, targetNamespaces []string, podExec bool, labels map[string]string) []client.Object {
	var out []client.Object
	core := func(kind string) schema.GroupVersionKind { return corev1.SchemeGroupVersion.WithKind(kind) }
	rbac := func(kind string) schema.GroupVersionKind { return rbacv1.SchemeGroupVersion.WithKind(kind) }
	add := func(o client.Object, gvk schema.GroupVersionKind) {
		o.GetObjectKind().SetGroupVersionKind(gvk)
		o.SetLabels(labels)
		out = append(out, o)
	}
	// The applier's namespace is created (labelled) by the hardening, which runs first.
	applier := &corev1.ServiceAccount{}
	applier.Namespace, applier.Name = ApplierNamespace, ApplierName
	add(applier, core("ServiceAccount"))

	deployers := sorted(deployerNamespaces)
	var subjects []rbacv1.Subject
	for _, dns := range deployers {
		// Flux impersonates the deployer and needs no token of it; a pod that names it
		// is refused anyway (the deployer-credentials policy), so this only keeps its
		// token out of pods should that policy ever be missing.
		sa := &corev1.ServiceAccount{AutomountServiceAccountToken: ptr.To(false)}
		sa.Namespace, sa.Name = dns, cpv1.DeployerName
		add(sa, core("ServiceAccount"))
		subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: dns, Name: cpv1.DeployerName})

		imp := &rbacv1.Role{Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"},
			ResourceNames: []string{cpv1.DeployerName},
		}}}
		imp.Namespace, imp.Name = dns, ApplierName
		add(imp, rbac("Role"))
		impBinding := &rbacv1.RoleBinding{
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ApplierName},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ApplierNamespace, Name: ApplierName}},
		}
		impBinding.Namespace, impBinding.Name = dns, ApplierName
		add(impBinding, rbac("RoleBinding"))
	}
	for _, tns := range sorted(targetNamespaces) {
		role := &rbacv1.Role{Rules: DeployerRules(podExec)}
		role.Namespace, role.Name = tns, cpv1.DeployerName
		add(role, rbac("Role"))
		binding := &rbacv1.RoleBinding{
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: cpv1.DeployerName},
			Subjects: subjects,
		}
		binding.Namespace, binding.Name = tns, cpv1.DeployerName
		add(binding, rbac("RoleBinding"))
	}
	return out
}

func sorted(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out
}

// ExactFields are the fields of an identity object that must read back exactly as the
// operator wrote them: an added rule or subject grants something.
func ExactFields(obj client.Object) []string {
	switch obj.(type) {
	case *rbacv1.Role, *rbacv1.ClusterRole:
		return []string{"rules"}
	case *rbacv1.RoleBinding, *rbacv1.ClusterRoleBinding:
		return []string{"subjects", "roleRef"}
	}
	return nil
}

// servedVersions is the version the operator reads each of DeployerRules' groups at.
var servedVersions = map[string]string{
	"": "v1", "apps": "v1", "batch": "v1", "networking.k8s.io": "v1", "policy": "v1",
	"autoscaling": "v2", "rbac.authorization.k8s.io": "v1", "discovery.k8s.io": "v1",
}

// DeployerWritable is every resource a deployer may create in its target namespaces
// (DeployerRules, subresources left out), at the version the operator reads it: what a
// release applied as the deployer can have left there. It panics on a group
// servedVersions does not know, so a rule added without its version fails every test.
func DeployerWritable() []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, rule := range DeployerRules(false) {
		if !slices.Contains(rule.Verbs, "create") {
			continue
		}
		for _, g := range rule.APIGroups {
			v, ok := servedVersions[g]
			if !ok {
				panic("posture: no version for the deployer's API group " + g)
			}
			for _, r := range rule.Resources {
				if !strings.Contains(r, "/") {
					out = append(out, schema.GroupVersionResource{Group: g, Version: v, Resource: r})
				}
			}
		}
	}
	return out
}
