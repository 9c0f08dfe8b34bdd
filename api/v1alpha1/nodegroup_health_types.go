package v1alpha1

import "k8s.io/apimachinery/pkg/util/intstr"

// NodeHealthCheck is the class's MachineHealthCheck for node groups, in the terms of
// Cluster API's v1beta2 MachineHealthCheck (spec.checks and spec.remediation.triggerIf).
type NodeHealthCheck struct {
	// NodeStartupTimeoutSeconds is how long a node group's Machine may go without its
	// Node before it is remediated (Cluster API's checks.nodeStartupTimeoutSeconds).
	// A node is a VM that imports its disk and boots, so it gets longer than Cluster
	// API's 10 minutes. 0 turns the startup check off.
	// +optional
	// +kubebuilder:default=1200
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	NodeStartupTimeoutSeconds *int32 `json:"nodeStartupTimeoutSeconds,omitempty"`

	// UnhealthyNodeConditions make a Node unhealthy when any of them has held for its
	// timeout (Cluster API's checks.unhealthyNodeConditions). Empty means Ready False or
	// Unknown for 300 seconds.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	UnhealthyNodeConditions []UnhealthyNodeCondition `json:"unhealthyNodeConditions,omitempty"`

	// UnhealthyLessThanOrEqualTo stops remediation while more Machines of a group than
	// this (a count, or a percentage of the group) are unhealthy at once (Cluster API's
	// remediation.triggerIf.unhealthyLessThanOrEqualTo, formerly maxUnhealthy): many
	// nodes failing together is an outage of something else, which replacing them would
	// make worse.
	// +optional
	// +kubebuilder:default="40%"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="unhealthyLessThanOrEqualTo is a count (0 or more) or a percentage (0% to 100%)"
	UnhealthyLessThanOrEqualTo *intstr.IntOrString `json:"unhealthyLessThanOrEqualTo,omitempty"`
}

// UnhealthyNodeCondition is a Node condition that makes a node unhealthy once it has
// held for TimeoutSeconds.
type UnhealthyNodeCondition struct {
	// Type of the Node condition, for example Ready.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	Type string `json:"type"`

	// Status of the condition.
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status string `json:"status"`

	// TimeoutSeconds the condition must hold before the node is unhealthy.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	TimeoutSeconds int32 `json:"timeoutSeconds"`
}

// ClusterAutoscalerProfile is the cluster-autoscaler of a plane whose node groups
// autoscale. It runs on the management cluster in the plane's infrastructure namespace,
// with Cluster API's provider confined to that namespace and that Cluster.
type ClusterAutoscalerProfile struct {
	// Image of the cluster-autoscaler. Empty means
	// registry.k8s.io/autoscaling/cluster-autoscaler:v1.<minor>.0, the release of the
	// class's Kubernetes minor version (the autoscaler's scheduler simulation must match
	// the plane's Kubernetes).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
}
