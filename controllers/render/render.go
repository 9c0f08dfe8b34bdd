package render

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// Graph is a plane's infrastructure, in apply order.
type Graph struct {
	// Namespace is the dedicated infrastructure namespace.
	Namespace *corev1.Namespace
	// Objects are applied in order: the control plane and infrastructure before the
	// Cluster that references them, templates before the MachineDeployments that use them.
	Objects []client.Object
	// NodeGroups are the rendered node groups (their objects are also in Objects).
	NodeGroups []NodeGroup
	// Autoscaler is the cluster-autoscaler's ServiceAccount, RoleBinding and Deployment,
	// or nothing when no node group autoscales. They are not in Objects: the operator
	// writes them with rights it holds in the infrastructure namespace alone.
	Autoscaler []client.Object
}

// Plane renders a plane's whole infrastructure graph. The control plane always gets the
// class's version; workers get workerVersion (see WorkerVersion), so that an upgrade moves
// the control plane first and the workers after it.
func Plane(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass, workerVersion string) (*Graph, error) {
	groups, err := NodeGroups(plane, class, workerVersion)
	if err != nil {
		return nil, err
	}
	g := &Graph{NodeGroups: groups}
	ns := &corev1.Namespace{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	ns.Name = InfrastructureNamespace(plane, class)
	// The infrastructure runs VMs (virt-launcher pods), which need more than
	// restricted; tenants have no access to this namespace at all.
	ns.Labels = merge(PlaneLabels(plane), map[string]string{cpv1.PodSecurityEnforceLabel: "privileged"})
	g.Namespace = ns
	g.Objects = append(g.Objects, KamajiControlPlane(plane, class), KubevirtCluster(plane, class), Cluster(plane, class))
	for _, ng := range groups {
		g.Objects = append(g.Objects, ng.MachineTemplate, ng.BootstrapTemplate, ng.MachineDeployment, ng.HealthCheck)
	}
	g.Autoscaler = Autoscaler(plane, class)
	for _, a := range Addons(plane, class) {
		g.Objects = append(g.Objects, a)
	}
	return g, nil
}
