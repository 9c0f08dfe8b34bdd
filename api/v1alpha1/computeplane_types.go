package v1alpha1

import (
	"github.com/fluxcd/pkg/apis/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ComputePlaneSpec holds only the knobs a tenant may turn. Everything that decides the
// plane's security posture comes from its class and cannot be set here.
type ComputePlaneSpec struct {
	// ClassName is the ComputePlaneClass this plane is built from. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="className is immutable: create a new ComputePlane to move to another class"
	ClassName string `json:"className"`

	// NodeGroups are the plane's worker pools, keyed by a name of at most 40 lowercase
	// alphanumerics or '-'. The class bounds their number, sizes, instance types and GPUs.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 40 && k.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",message="node group names must be at most 40 lowercase alphanumeric characters or '-', starting and ending with an alphanumeric"
	NodeGroups map[string]NodeGroup `json:"nodeGroups,omitempty"`

	// ServiceAccess lists the Services of this namespace the plane's VMs may reach, and on
	// which ports: the plane's half of a grant. A grant exists only when the Service's
	// owner agrees too, by labelling it computeplane.cozystack.io/plane-access=<plane
	// name>; status.serviceAccess says, per entry, whether it is granted, pending or
	// refused. Nothing else in the management cluster is reachable.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	ServiceAccess []ServiceAccess `json:"serviceAccess,omitempty"`

	// PlacementNamespaces are extra namespaces the operator pre-creates in the plane for
	// placement releases (hardened, with quota), beyond the one named like this namespace.
	// System namespaces are refused: default, kube-*, the operator's own computeplane-*,
	// and (checked by the controller, which knows the class) the class's Pod Security
	// exempt namespaces and its add-ons' target namespaces. A namespace that already
	// exists in the plane and was not created by the operator for this plane is never
	// adopted (Valid=False/PlacementNamespaceConflict); one taken out of the list keeps
	// its objects, but placement releases lose their rights there.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self.all(n, !n.startsWith('kube-') && n != 'default' && !n.startsWith('computeplane-'))",message="placementNamespaces may not name default, kube-* or computeplane-* system namespaces"
	PlacementNamespaces []string `json:"placementNamespaces,omitempty"`
}

// NodeGroup is one worker pool: KubeVirt VMs managed by a Cluster API MachineDeployment.
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="minReplicas must be less than or equal to maxReplicas"
// +kubebuilder:validation:XValidation:rule="has(self.instanceType) != has(self.resources)",message="set exactly one of instanceType or resources"
type NodeGroup struct {
	// MinReplicas is the autoscaler's floor; 0 lets the group scale from zero.
	// +kubebuilder:validation:Minimum=0
	MinReplicas int32 `json:"minReplicas"`

	// MaxReplicas is the autoscaler's ceiling, at most the class's nodeGroups.maxReplicas.
	// +kubebuilder:validation:Minimum=1
	MaxReplicas int32 `json:"maxReplicas"`

	// InstanceType names a KubeVirt VirtualMachineClusterInstancetype the class allows.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	InstanceType string `json:"instanceType,omitempty"`

	// Resources sizes each node explicitly, within the class's maxCPU and maxMemory.
	// +optional
	Resources *NodeResources `json:"resources,omitempty"`

	// DiskSize of each node's system disk; the class default when empty.
	// +optional
	DiskSize *resource.Quantity `json:"diskSize,omitempty"`

	// GPUs attached to each node, by device name; only those the class allows.
	// +optional
	// +listType=map
	// +listMapKey=deviceName
	// +kubebuilder:validation:MaxItems=8
	GPUs []NodeGPU `json:"gpus,omitempty"`

	// Roles become node-role.kubernetes.io/<role> labels on the group's nodes.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=40
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Roles []string `json:"roles,omitempty"`
}

// NodeResources sizes a node.
type NodeResources struct {
	// CPU cores of each node.
	CPU resource.Quantity `json:"cpu"`
	// Memory of each node.
	Memory resource.Quantity `json:"memory"`
}

// NodeGPU attaches GPUs of one device type to each node of a group.
type NodeGPU struct {
	// DeviceName as KubeVirt exposes it, for example "nvidia.com/GA102GL_A10".
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$`
	// +kubebuilder:validation:MaxLength=253
	DeviceName string `json:"deviceName"`
	// Count of devices per node.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Count int32 `json:"count,omitempty"`
}

// ServiceAccess grants the plane's VMs egress to one Service of the ComputePlane's
// namespace, on the listed ports only.
type ServiceAccess struct {
	// Name of the Service in this namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Ports of the Service the plane may reach.
	// +listType=map
	// +listMapKey=port
	// +listMapKey=protocol
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Ports []ServicePort `json:"ports"`
}

// ServicePort is one port of a granted Service.
type ServicePort struct {
	// Port number, as the Service exposes it.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// Protocol of the port.
	// +kubebuilder:default=TCP
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	Protocol string `json:"protocol"`
}

// GrantState is where one requested Service access stands.
// +kubebuilder:validation:Enum=Granted;Pending;Refused
type GrantState string

const (
	// GrantGranted: both sides agree; the plane's VMs may reach the Service's backends
	// on the requested ports.
	GrantGranted GrantState = "Granted"
	// GrantPending: the Service does not exist or its owner has not opted in yet.
	GrantPending GrantState = "Pending"
	// GrantRefused: the request cannot be granted as it is (the Service has no
	// selector, does not expose a requested port, ...); the reason says.
	GrantRefused GrantState = "Refused"
)

// ServiceAccessStatus is where one entry of spec.serviceAccess stands.
type ServiceAccessStatus struct {
	// Name of the Service.
	Name string `json:"name"`
	// State of the grant.
	State GrantState `json:"state"`
	// Message says why, or which backend ports a granted Service opens.
	// +optional
	Message string `json:"message,omitempty"`
}

// PlacementCounts counts the placement HelmReleases of a plane's namespace.
type PlacementCounts struct {
	// Held releases wait for the plane to be Ready (the gate is closed).
	Held int32 `json:"held"`
	// Routed releases are applied into the plane (the gate is open).
	Routed int32 `json:"routed"`
	// Refused releases are labelled for placement but not routed as admission requires
	// (created while the webhook was not installed); Flux is not stopped from acting on
	// them, so a person must look.
	// +optional
	Refused int32 `json:"refused,omitempty"`
	// Uninstalling releases were deleted and wait until Flux has uninstalled them from
	// the plane (while the gate is closed, until it reopens).
	// +optional
	Uninstalling int32 `json:"uninstalling,omitempty"`
}

// DeletionStatus is where a plane's teardown is.
type DeletionStatus struct {
	// Stage the teardown waits on (the Reconciling condition's reason).
	Stage string `json:"stage"`
	// Since is when the teardown began waiting on it.
	Since metav1.Time `json:"since"`
}

// ComputePlaneStatus is what the operator observed about a plane.
type ComputePlaneStatus struct {
	// ObservedGeneration is the generation of the spec the status describes; it moves
	// only when a reconcile finished, not while one is still waiting.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready (always), Reconciling and Stalled (only while true), and one per
	// stage of the lifecycle. See the reasons in conditions.go.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastHandledReconcileAt echoes the reconcile.fluxcd.io/requestedAt annotation the
	// operator last handled.
	meta.ReconcileRequestStatus `json:",inline"`

	// InfrastructureNamespace holds the plane's Cluster API objects and credentials.
	// +optional
	InfrastructureNamespace string `json:"infrastructureNamespace,omitempty"`

	// DataStoreName is the Kamaji DataStore the plane's state is kept in, chosen when it
	// was created (its class's spec.controlPlane.dataStores); empty: Kamaji's default.
	// +optional
	DataStoreName string `json:"dataStoreName,omitempty"`

	// Endpoint of the plane's API server.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// Version the plane's API server reports.
	// +optional
	Version string `json:"version,omitempty"`

	// ServiceAccess is where each entry of spec.serviceAccess stands.
	// +optional
	// +listType=map
	// +listMapKey=name
	ServiceAccess []ServiceAccessStatus `json:"serviceAccess,omitempty"`

	// Deletion, while the plane is being deleted, is the teardown stage it waits on and
	// since when.
	// +optional
	Deletion *DeletionStatus `json:"deletion,omitempty"`

	// Placement counts the namespace's placement releases (written by the placement
	// controller, with the PlacementOpen condition).
	// +optional
	Placement *PlacementCounts `json:"placement,omitempty"`
}

// ComputePlane is a tenant's isolated, operator-hardened Kubernetes cluster (a Kamaji
// control plane with KubeVirt workers). At most one may exist per namespace.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cp
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.className`,priority=1
// +kubebuilder:printcolumn:name="DataStore",type=string,JSONPath=`.status.dataStoreName`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ComputePlane struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the tenant asks for.
	Spec ComputePlaneSpec `json:"spec"`
	// Status is what the operator observed.
	// +optional
	Status ComputePlaneStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *ComputePlane) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the status conditions.
func (in *ComputePlane) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// ComputePlaneList is a list of ComputePlanes.
// +kubebuilder:object:root=true
type ComputePlaneList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ComputePlane `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ComputePlane{}, &ComputePlaneList{})
}
