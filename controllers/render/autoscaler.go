package render

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// The cluster-autoscaler of a plane is a Deployment the operator applies in the plane's
// infrastructure namespace, on the management cluster, rather than a Flux HelmRelease of
// the upstream chart: the operator then writes exactly the rights reviewed here (a
// RoleBinding in that namespace to a shipped ClusterRole, nothing cluster-scoped; the
// chart creates its own RBAC with helm-controller's rights), needs no chart source on the
// platform, and drift-checks the Deployment like the rest of the infrastructure.
const (
	// AutoscalerClusterRole is the ClusterRole config/rbac ships with what Cluster API's
	// provider of the cluster-autoscaler reads and writes on the management cluster. The
	// operator binds it in a plane's infrastructure namespace only (a RoleBinding), so
	// the autoscaler's rights end at that namespace; the operator holds `bind` on this
	// one role and nothing of its content.
	AutoscalerClusterRole = "computeplane-cluster-autoscaler"
	// AutoscalerComponent names the autoscaler's pods (app.kubernetes.io/name).
	AutoscalerComponent = "cluster-autoscaler"
	// AutoscalerKubeconfigDir is where the plane's kubeconfig is mounted in its pod.
	AutoscalerKubeconfigDir = "/etc/cluster-autoscaler/workload"
	// AutoscalerPlaneNamespace is the namespace of the plane where the autoscaler's own
	// identity lives and where it keeps its Lease and status ConfigMap: the operator's
	// (posture.AutoscalerNamespace; render does not import remote, whose tests import
	// render).
	AutoscalerPlaneNamespace = "computeplane-system"
	// AutoscalerKubeconfigKey is the key of AutoscalerKubeconfigSecretName's kubeconfig.
	AutoscalerKubeconfigKey = "value"
	// AutoscalerImageRepository is the upstream image, tagged v1.<minor>.0 by default.
	AutoscalerImageRepository = "registry.k8s.io/autoscaling/cluster-autoscaler"
)

// AutoscalerName names the autoscaler's ServiceAccount, RoleBinding and Deployment.
func AutoscalerName(plane *cpv1.ComputePlane) string {
	return fitName(ClusterName(plane)+"-cluster-autoscaler", 63)
}

// AutoscalerKubeconfigSecretName names the Secret, in the infrastructure namespace, of
// the autoscaler's kubeconfig for the plane: a bounded token of its own ServiceAccount
// in the plane (posture.AutoscalerIdentity), issued and renewed by the operator.
func AutoscalerKubeconfigSecretName(plane *cpv1.ComputePlane) string {
	return fitName(ClusterName(plane)+"-cluster-autoscaler-kubeconfig", 63)
}

// Autoscaled reports whether some node group of the plane autoscales.
func Autoscaled(plane *cpv1.ComputePlane) bool {
	for _, g := range plane.Spec.NodeGroups {
		if g.MinReplicas != g.MaxReplicas {
			return true
		}
	}
	return false
}

// Autoscaler renders the plane's cluster-autoscaler: its ServiceAccount, the
// RoleBinding of AutoscalerClusterRole to it in the infrastructure namespace, and its
// Deployment. Nothing when no node group autoscales.
func Autoscaler(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass) []client.Object {
	if !Autoscaled(plane) {
		return nil
	}
	ns, name := InfrastructureNamespace(plane, class), AutoscalerName(plane)
	labels := merge(PlaneLabels(plane), map[string]string{cpv1.ClusterNameLabel: ClusterName(plane)})

	sa := &corev1.ServiceAccount{}
	sa.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccount"))
	sa.Namespace, sa.Name, sa.Labels = ns, name, labels

	rb := &rbacv1.RoleBinding{}
	rb.SetGroupVersionKind(rbacv1.SchemeGroupVersion.WithKind("RoleBinding"))
	rb.Namespace, rb.Name, rb.Labels = ns, name, labels
	rb.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AutoscalerClusterRole}
	rb.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}

	return []client.Object{sa, rb, autoscalerDeployment(plane, class, ns, name, labels)}
}

// AutoscalerArgs are the autoscaler's flags: Cluster API's provider, the management
// cluster through the pod's own ServiceAccount (--clusterapi-cloud-config-authoritative
// with no --cloud-config), the plane through its own identity's kubeconfig
// (--kubeconfig), its leader-election Lease and status ConfigMap in that identity's
// namespace of the plane (--namespace), and node groups discovered in the
// infrastructure namespace, of this Cluster only (the provider's informers then watch
// that one namespace). The operator sets each autoscaled group's minimum, so the
// autoscaler enforces it.
func AutoscalerArgs(namespace, cluster string) []string {
	return []string{
		"--cloud-provider=clusterapi",
		"--clusterapi-cloud-config-authoritative",
		"--kubeconfig=" + AutoscalerKubeconfigDir + "/kubeconfig",
		"--namespace=" + AutoscalerPlaneNamespace,
		"--node-group-auto-discovery=clusterapi:namespace=" + namespace + ",clusterName=" + cluster,
		"--enforce-node-group-min-size=true",
	}
}

// AutoscalerImage is the class's image, or the upstream release of the class's
// Kubernetes minor version.
func AutoscalerImage(class *cpv1.ComputePlaneClass) string {
	if img := class.Spec.NodeGroups.Autoscaler.Image; img != "" {
		return img
	}
	parts := strings.SplitN(class.Spec.KubernetesVersion, ".", 3)
	if len(parts) < 2 {
		return AutoscalerImageRepository + ":" + class.Spec.KubernetesVersion
	}
	return AutoscalerImageRepository + ":" + parts[0] + "." + parts[1] + ".0"
}

// autoscalerDeployment runs one autoscaler (Recreate: never two at once) under the
// restricted Pod Security level. Its pods carry neither the plane's labels nor
// virt-launcher's, so neither the plane's egress baseline nor the namespace's default
// deny (which confine the VMs, and deny them the management kube-apiserver) selects
// them: the autoscaler must reach that apiserver.
func autoscalerDeployment(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass, ns, name string, labels map[string]string) *appsv1.Deployment {
	podLabels := map[string]string{
		cpv1.AppNameLabel:     AutoscalerComponent,
		cpv1.AppInstanceLabel: ClusterName(plane),
		cpv1.ManagedByLabel:   cpv1.ManagedByValue,
	}
	d := &appsv1.Deployment{}
	d.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	d.Namespace, d.Name, d.Labels = ns, name, labels
	d.Spec.Replicas = ptr.To(int32(1))
	d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: podLabels}
	d.Spec.Template.Labels = podLabels
	d.Spec.Template.Spec = corev1.PodSpec{
		ServiceAccountName:           name,
		AutomountServiceAccountToken: ptr.To(true), // its identity on the management cluster
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To(int64(65532)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:    AutoscalerComponent,
			Image:   AutoscalerImage(class),
			Command: []string{"/cluster-autoscaler"},
			Args:    AutoscalerArgs(ns, ClusterName(plane)),
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("300Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
			},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				ReadOnlyRootFilesystem:   ptr.To(true),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "workload-kubeconfig", MountPath: AutoscalerKubeconfigDir, ReadOnly: true}},
		}},
		Volumes: []corev1.Volume{{Name: "workload-kubeconfig", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: AutoscalerKubeconfigSecretName(plane),
			Items:      []corev1.KeyToPath{{Key: AutoscalerKubeconfigKey, Path: "kubeconfig"}},
		}}}},
	}
	return d
}
