package render

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// Health check defaults, for a class stored before the fields existed (the CRD
// defaults them on every class written since).
const (
	// DefaultNodeStartupTimeoutSeconds: a node is a VM that imports its disk first.
	DefaultNodeStartupTimeoutSeconds int32 = 1200
	// DefaultUnhealthyNodeTimeoutSeconds is how long Ready may be False or Unknown.
	DefaultUnhealthyNodeTimeoutSeconds int32 = 300
)

// DefaultUnhealthyLessThanOrEqualTo stops remediation while more than 40% of a group is
// unhealthy.
var DefaultUnhealthyLessThanOrEqualTo = intstr.FromString("40%")

// MachineHealthCheck is a node group's health check: it selects exactly the Machines
// of the group's MachineDeployment (the same labels as its selector) and carries the
// class's thresholds. Nothing of it comes from the ComputePlane but the group's name,
// so a tenant cannot loosen it.
func MachineHealthCheck(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass, group string) *clusterv1.MachineHealthCheck {
	hc := class.Spec.NodeGroups.HealthCheck
	cluster := ClusterName(plane)
	m := &clusterv1.MachineHealthCheck{}
	m.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("MachineHealthCheck"))
	m.Namespace = InfrastructureNamespace(plane, class)
	m.Name = MachineDeploymentName(plane, group)
	m.Labels = merge(PlaneLabels(plane), map[string]string{cpv1.ClusterNameLabel: cluster, cpv1.NodeGroupLabel: group})
	m.Spec.ClusterName = cluster
	m.Spec.Selector = metav1.LabelSelector{MatchLabels: machineSelector(cluster, group)}
	m.Spec.Checks.NodeStartupTimeoutSeconds = ptr.To(ptr.Deref(hc.NodeStartupTimeoutSeconds, DefaultNodeStartupTimeoutSeconds))
	m.Spec.Checks.UnhealthyNodeConditions = unhealthyNodeConditions(hc.UnhealthyNodeConditions)
	m.Spec.Remediation.TriggerIf.UnhealthyLessThanOrEqualTo = ptr.To(ptr.Deref(hc.UnhealthyLessThanOrEqualTo, DefaultUnhealthyLessThanOrEqualTo))
	return m
}

// machineSelector selects a node group's Machines: what its MachineDeployment selects.
func machineSelector(cluster, group string) map[string]string {
	return map[string]string{cpv1.ClusterNameLabel: cluster, cpv1.NodeGroupLabel: group}
}

func unhealthyNodeConditions(in []cpv1.UnhealthyNodeCondition) []clusterv1.UnhealthyNodeCondition {
	if len(in) == 0 {
		return []clusterv1.UnhealthyNodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To(DefaultUnhealthyNodeTimeoutSeconds)},
			{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: ptr.To(DefaultUnhealthyNodeTimeoutSeconds)},
		}
	}
	out := make([]clusterv1.UnhealthyNodeCondition, 0, len(in))
	for _, c := range in {
		out = append(out, clusterv1.UnhealthyNodeCondition{Type: corev1.NodeConditionType(c.Type), Status: corev1.ConditionStatus(c.Status), TimeoutSeconds: ptr.To(c.TimeoutSeconds)})
	}
	return out
}
