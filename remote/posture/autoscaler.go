package posture

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The cluster-autoscaler of a plane whose node groups autoscale runs on the management
// cluster and reaches the plane with an identity of its own, never the plane's admin
// kubeconfig: a ServiceAccount in the operator's namespace of the plane (not an exempt
// system namespace, whose ServiceAccounts the plane's admission policies trust) with the
// rights the upstream autoscaler uses on the cluster it scales, and nothing else.
const (
	// AutoscalerName names the autoscaler's ServiceAccount, ClusterRole,
	// ClusterRoleBinding, Role and RoleBinding in the plane.
	AutoscalerName = "computeplane-cluster-autoscaler"
	// AutoscalerNamespace is where its ServiceAccount, its leader-election Lease and its
	// status ConfigMap live (the autoscaler's --namespace).
	AutoscalerNamespace = ApplierNamespace
	// AutoscalerLease is the autoscaler's leader-election Lease (its default name).
	AutoscalerLease = "cluster-autoscaler"
	// AutoscalerStatusConfigMap is the ConfigMap the autoscaler writes its status to.
	AutoscalerStatusConfigMap = "cluster-autoscaler-status"
)

// AutoscalerRules are the autoscaler's rights across the plane: the workload-cluster
// part of the upstream chart's ClusterRole (kubernetes/autoscaler,
// cluster-autoscaler/charts/cluster-autoscaler/templates/clusterrole.yaml) for the
// clusterapi provider. Left out: the cluster.x-k8s.io rules (those are on the
// management cluster), other providers' rules (kwok, coreweave, huaweicloud), the
// PodSecurityPolicy, the Endpoints leader lock (the lock is a Lease), ConfigMaps across
// the plane (it reads only its own, AutoscalerNamespaceRules), and what features the
// operator does not turn on use (ProvisioningRequests and their PodTemplates, capacity
// buffers and quotas, dynamic resource allocation, the jobs patch). Nodes: update, the
// chart's verb for its taints (ToBeDeletedByClusterAutoscaler); never create or delete:
// Cluster API deletes a Node with its Machine.
func AutoscalerRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces", "pods", "services", "replicationcontrollers", "persistentvolumeclaims", "persistentvolumes"}, Verbs: ro},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: ro},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets", "deployments", "replicasets", "statefulsets"}, Verbs: ro},
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses", "csinodes", "csidrivers", "csistoragecapacities", "volumeattachments"}, Verbs: ro},
	}
}

// AutoscalerNamespaceRules are its rights in AutoscalerNamespace: the chart's Role
// (templates/role.yaml) and its Lease rules, by name where the chart names them.
func AutoscalerNamespaceRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{AutoscalerStatusConfigMap}, Verbs: []string{"get", "update", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{AutoscalerLease}, Verbs: []string{"get", "update"}},
	}
}

// AutoscalerIdentity is the autoscaler's identity in the plane: its ServiceAccount (no
// token mounted anywhere: the operator issues bounded tokens for it), the ClusterRole of
// AutoscalerRules and the Role of AutoscalerNamespaceRules, each bound to it alone.
func AutoscalerIdentity(labels map[string]string) []client.Object {
	var out []client.Object
	add := func(o client.Object, gvk schema.GroupVersionKind) {
		o.GetObjectKind().SetGroupVersionKind(gvk)
		o.SetLabels(labels)
		out = append(out, o)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: AutoscalerNamespace, Name: AutoscalerName}}

	sa := &corev1.ServiceAccount{AutomountServiceAccountToken: ptr.To(false)}
	sa.Namespace, sa.Name = AutoscalerNamespace, AutoscalerName
	add(sa, corev1.SchemeGroupVersion.WithKind("ServiceAccount"))

	cr := &rbacv1.ClusterRole{Rules: AutoscalerRules()}
	cr.Name = AutoscalerName
	add(cr, rbacv1.SchemeGroupVersion.WithKind("ClusterRole"))
	crb := &rbacv1.ClusterRoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AutoscalerName},
		Subjects: subject,
	}
	crb.Name = AutoscalerName
	add(crb, rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"))

	role := &rbacv1.Role{Rules: AutoscalerNamespaceRules()}
	role.Namespace, role.Name = AutoscalerNamespace, AutoscalerName
	add(role, rbacv1.SchemeGroupVersion.WithKind("Role"))
	rb := &rbacv1.RoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: AutoscalerName},
		Subjects: subject,
	}
	rb.Namespace, rb.Name = AutoscalerNamespace, AutoscalerName
	add(rb, rbacv1.SchemeGroupVersion.WithKind("RoleBinding"))
	return out
}
