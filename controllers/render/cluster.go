package render

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// Groups and kinds of the providers whose Go types cannot be a dependency (see
// TOOLCHAIN.md): they are rendered as unstructured objects and validated by their real
// CRDs in the test apiservers.
const (
	ControlPlaneGroup      = "controlplane.cluster.x-k8s.io"
	KamajiControlPlaneKind = "KamajiControlPlane"
	KamajiAPIVersion       = ControlPlaneGroup + "/v1alpha2"
	InfrastructureGroup    = "infrastructure.cluster.x-k8s.io"
	KubevirtAPIVersion     = InfrastructureGroup + "/v1alpha1"
	KubevirtClusterKind    = "KubevirtCluster"
	KubevirtTemplateKind   = "KubevirtMachineTemplate"
)

// Cluster is the CAPI Cluster tying the Kamaji control plane to the KubeVirt
// infrastructure.
func Cluster(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass) *clusterv1.Cluster {
	name := ClusterName(plane)
	c := &clusterv1.Cluster{}
	c.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("Cluster"))
	c.Namespace = InfrastructureNamespace(plane, class)
	c.Name = name
	c.Labels = merge(PlaneLabels(plane), map[string]string{cpv1.ClusterNameLabel: name})
	c.Spec.ControlPlaneRef = clusterv1.ContractVersionedObjectReference{
		APIGroup: ControlPlaneGroup, Kind: KamajiControlPlaneKind, Name: name,
	}
	c.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{
		APIGroup: InfrastructureGroup, Kind: KubevirtClusterKind, Name: name,
	}
	return c
}

// KamajiControlPlane is the hosted control plane: version, replicas and Service type
// from the class, the DataStore chosen for the plane (status.dataStoreName); the admin kubeconfig key pinned so the operator knows
// which credential it reads.
func KamajiControlPlane(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass) *unstructured.Unstructured {
	cp := class.Spec.ControlPlane
	spec := map[string]any{
		"version":  class.Spec.KubernetesVersion,
		"replicas": int64(cp.Replicas),
		"network":  map[string]any{"serviceType": string(cp.ServiceType)},
		"addons": map[string]any{
			"coreDNS":      map[string]any{},
			"kubeProxy":    map[string]any{},
			"konnectivity": map[string]any{},
		},
	}
	// The DataStore chosen for the plane when it was created (tenancy.DataStoreFor);
	// the class's before anything is recorded.
	if ds := plane.Status.DataStoreName; ds != "" {
		spec["dataStoreName"] = ds
	} else if cp.DataStoreName != "" {
		spec["dataStoreName"] = cp.DataStoreName
	}
	u := object(KamajiAPIVersion, KamajiControlPlaneKind, InfrastructureNamespace(plane, class), ClusterName(plane), plane)
	u.SetAnnotations(map[string]string{cpv1.KamajiKubeconfigSecretKeyAnnotation: AdminKubeconfigKey})
	u.Object["spec"] = spec
	return u
}

// KubevirtCluster is CAPK's cluster object, externally managed: Kamaji provides the
// control plane endpoint, so CAPK creates no load balancer of its own.
func KubevirtCluster(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass) *unstructured.Unstructured {
	u := object(KubevirtAPIVersion, KubevirtClusterKind, InfrastructureNamespace(plane, class), ClusterName(plane), plane)
	u.SetAnnotations(map[string]string{cpv1.ClusterManagedByAnnotation: "kamaji"})
	u.Object["spec"] = map[string]any{}
	return u
}

func object(apiVersion, kind, namespace, name string, plane *cpv1.ComputePlane) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetLabels(merge(PlaneLabels(plane), map[string]string{cpv1.ClusterNameLabel: ClusterName(plane)}))
	return u
}
