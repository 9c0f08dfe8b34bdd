package v1alpha1

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InfrastructurePlacement says where a plane's infrastructure objects live.
//
// There is one placement, DedicatedNamespace. Infrastructure in the tenant namespace
// (TenantNamespace, removed) put Kamaji's and Cluster API's Secrets (the admin
// kubeconfig, CA keys) where any tenant object can name them without reading them: a
// HelmRelease or Kustomization kubeConfig, valuesFrom, postBuild.substituteFrom, and
// whatever field the next Flux release adds. Hiding Secrets from tenants does not stop a
// tenant naming one. A class stored with it reports its planes Valid=False.
// +kubebuilder:validation:Enum=DedicatedNamespace
type InfrastructurePlacement string

const (
	// DedicatedNamespace keeps the Cluster API objects, Kamaji's Secrets (the admin
	// kubeconfig among them), the VMs and the system add-on releases in an operator-owned
	// namespace per plane, out of the tenant's reach: no tenant object can name them.
	DedicatedNamespace InfrastructurePlacement = "DedicatedNamespace"
)

// PodSecurityLevel is a Pod Security Standards level.
// +kubebuilder:validation:Enum=privileged;baseline;restricted
type PodSecurityLevel string

const (
	// PodSecurityRestricted is the level untrusted code runs under.
	PodSecurityRestricted PodSecurityLevel = "restricted"
	// PodSecurityBaseline forbids known privilege escalations only.
	PodSecurityBaseline PodSecurityLevel = "baseline"
	// PodSecurityPrivileged enforces nothing.
	PodSecurityPrivileged PodSecurityLevel = "privileged"
)

// InternetEgress says whether a plane's VMs may reach addresses outside the cluster.
// +kubebuilder:validation:Enum=Allow;Deny
type InternetEgress string

const (
	// InternetAllow lets the plane's VMs reach the internet (never cluster-internal
	// addresses, which only grants open).
	InternetAllow InternetEgress = "Allow"
	// InternetDeny confines the plane's VMs to DNS, their own control plane and granted
	// Services.
	InternetDeny InternetEgress = "Deny"
)

// ServiceType is how a plane's Kamaji control plane is exposed on the management cluster.
// +kubebuilder:validation:Enum=ClusterIP;LoadBalancer;NodePort
type ServiceType string

// ComputePlaneClassSpec is the operator-owned profile of a family of ComputePlanes.
// Everything security-relevant lives here; a tenant's ComputePlane only picks a class and
// sets the curated knobs, which the controller checks against the limits below.
// +kubebuilder:validation:XValidation:rule="self.infrastructure.placement == oldSelf.infrastructure.placement && self.infrastructure.namespacePrefix == oldSelf.infrastructure.namespacePrefix",message="infrastructure.placement and infrastructure.namespacePrefix are immutable: moving existing planes' infrastructure between namespaces is not supported; create a new class"
type ComputePlaneClassSpec struct {
	// AllowedNamespaces selects, by label, the tenant namespaces whose ComputePlanes may
	// use this class. Unset allows no namespace at all: a class is usable only once a
	// platform operator says by whom, because a class decides security posture (where
	// infrastructure lives, Pod Security, internet egress, pods/exec). `{}` allows every
	// namespace. Select on labels tenants cannot set: namespaces are cluster-scoped and
	// the tenant roles cannot edit them. A plane outside the selector is refused at
	// admission, and reported Valid=False/NamespaceNotAllowed if the selector changes later.
	// +optional
	AllowedNamespaces *metav1.LabelSelector `json:"allowedNamespaces,omitempty"`

	// KubernetesVersion of the control plane and the workers, for example "v1.33.4".
	// Raising it upgrades every plane of the class: the control plane first, then workers.
	// +kubebuilder:validation:Pattern=`^v1\.[0-9]+\.[0-9]+$`
	KubernetesVersion string `json:"kubernetesVersion"`

	// ControlPlane is the Kamaji hosted control plane profile.
	// +optional
	// +kubebuilder:default={}
	ControlPlane ControlPlaneProfile `json:"controlPlane,omitempty"`

	// Infrastructure says where each plane's infrastructure objects live.
	// +optional
	// +kubebuilder:default={}
	Infrastructure InfrastructureProfile `json:"infrastructure,omitempty"`

	// Addons are the system add-ons every plane of this class gets, installed by the
	// operator with the plane's admin credential (which the tenant never sees). A Kamaji
	// control plane has no CNI, so exactly one add-on must have the role CNI.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.filter(a, a.role == 'CNI').size() == 1",message="exactly one add-on must have role CNI: without a CNI the plane's workers never become Ready"
	Addons []SystemAddon `json:"addons"`

	// PodSecurity is the Pod Security Admission posture enforced inside each plane.
	// +optional
	// +kubebuilder:default={}
	PodSecurity PodSecurityProfile `json:"podSecurity,omitempty"`

	// Egress is the baseline of what a plane's VMs may reach from the management cluster.
	// +optional
	// +kubebuilder:default={}
	Egress EgressProfile `json:"egress,omitempty"`

	// NodeGroups bounds what a tenant may ask for in ComputePlane.spec.nodeGroups.
	// +optional
	// +kubebuilder:default={}
	NodeGroups NodeGroupLimits `json:"nodeGroups,omitempty"`

	// PlacementNamespaces holds the quota and limits given to every namespace the
	// operator creates in a plane for placement releases.
	// +optional
	PlacementNamespaces PlacementNamespaceDefaults `json:"placementNamespaces,omitempty"`

	// PlacementReleases is what the placement releases of this class's planes may use on
	// the management cluster.
	// +optional
	// +kubebuilder:default={}
	PlacementReleases PlacementReleasePolicy `json:"placementReleases,omitempty"`
}

// PlacementReleasePolicy bounds what a placement release (a tenant's HelmRelease applied
// into its plane) may reference on the management cluster.
type PlacementReleasePolicy struct {
	// SourceNamespaces lists the namespaces, besides the release's own, whose chart
	// sources (spec.chartRef, spec.chart.spec.sourceRef) a placement release may use:
	// typically the platform's public catalogue (for example cozy-public). Another
	// tenant's namespace must never be listed: Flux fetches a source with its namespace's
	// credentials, so naming it installs that tenant's private chart into this plane.
	// Unset: the release's own namespace only. Checked at admission, and again by the
	// placement controller: a release whose source a class change no longer allows is
	// suspended and reported (event NotRouted) until it fits again.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=63
	SourceNamespaces []string `json:"sourceNamespaces,omitempty"`

	// MaxReleases bounds the placement releases of one plane (its namespace's releases
	// labelled for placement); a create past it is refused at admission. Each is a
	// release Flux reconciles and the operator watches: one tenant must not load the
	// management cluster, or the operator, for every other.
	// +optional
	// +kubebuilder:default=200
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5000
	MaxReleases int32 `json:"maxReleases,omitempty"`

	// UninstallTimeout bounds how long a plane's teardown waits for Flux to uninstall its
	// placement releases. All that time the operator keeps an applier credential valid
	// (and only while the plane's hardening reads back as applied and in force), so Flux
	// can uninstall. Past it the credential is revoked, the plane reports
	// Stalled/UninstallTimedOut naming what holds each release (a finalizer that is not
	// Flux's, a Flux shard label no controller serves, an uninstall that keeps failing),
	// and only a platform operator's abandon annotation goes on. A release that Flux is
	// done with but another finalizer keeps does not hold the credential at all.
	// +optional
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('24h')",message="uninstallTimeout must be between 10s and 24h"
	UninstallTimeout *metav1.Duration `json:"uninstallTimeout,omitempty"`

	// MinInterval is the shortest interval a placement release may ask the shared Flux
	// controllers to work at: spec.interval, spec.chart.spec.interval and the install
	// and upgrade strategies' retryInterval. Flux's controllers serve every tenant, so
	// one tenant's releases at 1s would keep them busy for all (other tenants' installs,
	// teardowns' uninstalls). A release below it is refused at admission; one a class
	// change leaves below it is suspended and reported until it fits.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="minInterval must be between 1s and 24h"
	MinInterval *metav1.Duration `json:"minInterval,omitempty"`

	// MaxTimeout is the longest a placement release may let one Helm action hold a Flux
	// worker: spec.timeout and the install, upgrade, test, rollback and uninstall
	// timeouts. Judged like minInterval.
	// +optional
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s') && duration(self) <= duration('6h')",message="maxTimeout must be between 30s and 6h"
	MaxTimeout *metav1.Duration `json:"maxTimeout,omitempty"`

	// MaxRetries is the most remediation retries a placement release may ask for
	// (spec.install.remediation.retries, spec.upgrade.remediation.retries); a negative
	// number, Flux's "retry forever", is refused. Judged like minInterval.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxRetries *int32 `json:"maxRetries,omitempty"`

	// Selector declares placement on the application kind rather than in each release:
	// a HelmRelease it matches (by the release's own labels, e.g. the platform's
	// application-kind label) in the namespace of a plane of this class is a placement
	// release, as if it carried computeplane.cozystack.io/placement: ComputePlane;
	// admission adds that label and routes it into the plane, so no chart needs to know.
	// A matching release in a namespace this class allows that has no plane is refused,
	// as a labelled one is: it is never applied to the management cluster instead.
	// Judged when a release is created or changed: one stored before the selector was set
	// is routed at its next change (until then it is what it was).
	// +optional
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="an empty selector would make every HelmRelease of a plane's namespace a placement release; select the application kinds to route"
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// ControlPlaneProfile is the Kamaji control plane of each plane.
type ControlPlaneProfile struct {
	// DataStoreName is the Kamaji DataStore holding the planes' state.
	// Empty means Kamaji's default DataStore.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="dataStoreName is immutable"
	DataStoreName string `json:"dataStoreName,omitempty"`

	// DataStores says which planes share a Kamaji DataStore: a new plane's state goes to
	// the first entry whose namespaceSelector matches its namespace's labels, and to
	// dataStoreName when none does. Planes share a DataStore only when their namespaces
	// are selected to the same one: what one plane's charts write (bounded by the
	// placement namespaces' quota) fills only the DataStore of the planes it shares
	// with. An entry selecting one namespace by name (kubernetes.io/metadata.name) gives
	// that tenant a DataStore of its own. A plane keeps the DataStore it was created on
	// (status.dataStoreName): changing this list or a namespace's labels moves no plane.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	DataStores []DataStoreAssignment `json:"dataStores,omitempty"`

	// Replicas of the control plane's API server deployment.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	Replicas int32 `json:"replicas,omitempty"`

	// ServiceType exposes the control plane on the management cluster.
	// +optional
	// +kubebuilder:default=ClusterIP
	ServiceType ServiceType `json:"serviceType,omitempty"`
}

// DataStoreAssignment gives the planes of the namespaces it selects a Kamaji DataStore.
type DataStoreAssignment struct {
	// Name of the Kamaji DataStore.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// NamespaceSelector selects, by their labels, the namespaces whose planes use it.
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="an empty selector would put every plane of the class on this DataStore: use dataStoreName for that"
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
}

// InfrastructureProfile places a plane's infrastructure.
type InfrastructureProfile struct {
	// Placement is DedicatedNamespace (the default and only value): an operator-owned
	// namespace per plane, named <namespacePrefix><tenant namespace>-<first 8 hex digits
	// of the plane's UID>, the readable part shortened when too long.
	// +optional
	// +kubebuilder:default=DedicatedNamespace
	Placement InfrastructurePlacement `json:"placement,omitempty"`

	// NamespacePrefix names dedicated infrastructure namespaces.
	// +optional
	// +kubebuilder:default="cp-"
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*)?$`
	// +kubebuilder:validation:MaxLength=20
	NamespacePrefix string `json:"namespacePrefix,omitempty"`
}

// AddonRole tells the operator what an add-on provides to a plane.
// +kubebuilder:validation:Enum=CNI;CertManager;Ingress;Other
type AddonRole string

const (
	// AddonRoleCNI is the pod network; workers are not Ready without it.
	AddonRoleCNI AddonRole = "CNI"
	// AddonRoleCertManager issues certificates for placement applications.
	AddonRoleCertManager AddonRole = "CertManager"
	// AddonRoleIngress routes traffic to placement applications.
	AddonRoleIngress AddonRole = "Ingress"
	// AddonRoleOther is any other system component.
	AddonRoleOther AddonRole = "Other"
)

// SystemAddon is a Helm chart the operator installs into every plane of a class, as a
// Flux HelmRelease next to the plane's infrastructure.
type SystemAddon struct {
	// Name of the add-on, unique in the class.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=40
	Name string `json:"name"`

	// Role of the add-on.
	Role AddonRole `json:"role"`

	// ChartRef points at a Flux chart source (OCIRepository, HelmChart or
	// ExternalArtifact) in the management cluster.
	ChartRef AddonChartRef `json:"chartRef"`

	// TargetNamespace in the plane. It is exempt from Pod Security only when it is also
	// listed in podSecurity.exemptNamespaces.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	TargetNamespace string `json:"targetNamespace"`

	// Values passed to the chart.
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`

	// TrustedServiceAccounts are the add-on's ServiceAccounts (in targetNamespace) that
	// the plane's admission policies let do what only the operator may: cert-manager's
	// cainjector writes the CA bundles of webhooks, APIServices and conversion webhooks,
	// for one. No other identity is trusted like the operator, a ServiceAccount of an
	// exempt namespace included: list only what must be.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=253
	TrustedServiceAccounts []string `json:"trustedServiceAccounts,omitempty"`
}

// TrustedIdentities are the user names of the class's add-ons' trusted ServiceAccounts
// (spec.addons[].trustedServiceAccounts), sorted.
func (c *ComputePlaneClassSpec) TrustedIdentities() []string {
	var out []string
	for _, a := range c.Addons {
		for _, sa := range a.TrustedServiceAccounts {
			out = append(out, "system:serviceaccount:"+a.TargetNamespace+":"+sa)
		}
	}
	sort.Strings(out)
	return out
}

// AddonChartRef is a cross-namespace reference to a Flux chart source.
type AddonChartRef struct {
	// Kind of the source.
	// +kubebuilder:validation:Enum=OCIRepository;HelmChart;ExternalArtifact
	Kind string `json:"kind"`
	// Name of the source.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the source; empty means the release's own namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// PodSecurityProfile is the Pod Security Admission posture of a plane.
type PodSecurityProfile struct {
	// Level enforced on every namespace of the plane but the exempt ones.
	// +optional
	// +kubebuilder:default=restricted
	Level PodSecurityLevel `json:"level,omitempty"`

	// Version pins the Pod Security Standards version ("v1.33", or "latest").
	// +optional
	// +kubebuilder:default=latest
	// +kubebuilder:validation:Pattern=`^(latest|v1\.[0-9]+)$`
	Version string `json:"version,omitempty"`

	// ExemptNamespaces are the plane's system namespaces left at the privileged level
	// because the add-ons need it (a CNI runs privileged). Everything not listed is
	// enforced, including namespaces created later.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=63
	ExemptNamespaces []string `json:"exemptNamespaces,omitempty"`
}

// EgressProfile is the baseline egress of a plane's VMs.
type EgressProfile struct {
	// Internet is Allow or Deny (default). Cluster-internal destinations and the
	// management kube-apiserver stay denied either way.
	// +optional
	// +kubebuilder:default=Deny
	Internet InternetEgress `json:"internet,omitempty"`

	// DeniedCIDRs are denied to the plane's VMs whatever else allows them, internet
	// egress included: the management cluster's API addresses outside the cluster (a
	// load balancer or VIP in front of it, which Cilium does not count as the
	// kube-apiserver entity). Link-local addresses (169.254.0.0/16 and fe80::/10, cloud
	// metadata among them) and the clouds' IPv6 metadata endpoints are always denied.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c))",message="deniedCIDRs must be CIDRs, for example 203.0.113.10/32"
	DeniedCIDRs []string `json:"deniedCIDRs,omitempty"`

	// AllowSelectorlessServices lets planes be granted Services without a selector
	// (whose endpoints are written by hand, and so may point anywhere). Off by default;
	// the management kube-apiserver stays denied either way.
	// +optional
	AllowSelectorlessServices bool `json:"allowSelectorlessServices,omitempty"`
}

// NodeGroupLimits bound a tenant's node groups.
type NodeGroupLimits struct {
	// MaxGroups a plane may declare.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	MaxGroups int32 `json:"maxGroups,omitempty"`

	// MaxReplicas a node group may scale to.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MaxReplicas int32 `json:"maxReplicas,omitempty"`

	// MaxCPU per node, when a group sets resources instead of an instance type.
	// +optional
	MaxCPU *resource.Quantity `json:"maxCPU,omitempty"`

	// MaxMemory per node, when a group sets resources instead of an instance type.
	// +optional
	MaxMemory *resource.Quantity `json:"maxMemory,omitempty"`

	// MaxDiskSize per node.
	// +optional
	MaxDiskSize *resource.Quantity `json:"maxDiskSize,omitempty"`

	// InstanceTypes a group may use (KubeVirt VirtualMachineClusterInstancetype names).
	// Empty allows none: groups must then set resources.
	// +optional
	// +listType=set
	InstanceTypes []string `json:"instanceTypes,omitempty"`

	// GPUs a group may attach.
	// +optional
	// +listType=map
	// +listMapKey=deviceName
	GPUs []GPULimit `json:"gpus,omitempty"`

	// NodeImage is the container disk image the workers boot from (a CAPK node image
	// with kubeadm at the class's Kubernetes version). Empty means
	// quay.io/capk/ubuntu-2404-container-disk:<kubernetesVersion>.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	NodeImage string `json:"nodeImage,omitempty"`

	// StorageClassName of the VMs' system disks; empty means the cluster default.
	// +optional
	StorageClassName string `json:"storageClassName,omitempty"`

	// DefaultDiskSize of a node's system disk when the group does not set one.
	// +optional
	DefaultDiskSize *resource.Quantity `json:"defaultDiskSize,omitempty"`

	// HealthCheck is the Cluster API MachineHealthCheck every node group of every plane
	// of the class gets: when a node is remediated, and how many at once. Only the class
	// sets it; a ComputePlane has no field that loosens it.
	// +optional
	// +kubebuilder:default={}
	HealthCheck NodeHealthCheck `json:"healthCheck,omitempty"`

	// Autoscaler is the cluster-autoscaler a plane gets while one of its node groups is
	// autoscaled (minReplicas below maxReplicas).
	// +optional
	// +kubebuilder:default={}
	Autoscaler ClusterAutoscalerProfile `json:"autoscaler,omitempty"`
}

// GPULimit allows one GPU device type.
type GPULimit struct {
	// DeviceName as KubeVirt's permittedHostDevices exposes it, for example
	// "nvidia.com/GA102GL_A10".
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$`
	// +kubebuilder:validation:MaxLength=253
	DeviceName string `json:"deviceName"`

	// MaxPerNode devices of this type.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	MaxPerNode int32 `json:"maxPerNode,omitempty"`
}

// PlacementNamespaceDefaults are the quota and limits of placement namespaces.
type PlacementNamespaceDefaults struct {
	// Quota is the ResourceQuota hard limits of each placement namespace.
	// +optional
	Quota corev1.ResourceList `json:"quota,omitempty"`

	// LimitRange is the container limit range of each placement namespace.
	// +optional
	LimitRange []corev1.LimitRangeItem `json:"limitRange,omitempty"`

	// AllowPodExec lets the deployers (and so the placement releases' charts) exec into
	// pods of the placement namespaces. Off by default.
	// +optional
	AllowPodExec bool `json:"allowPodExec,omitempty"`
}

// ComputePlaneClass is an operator-owned profile for ComputePlanes: Kubernetes version,
// datastore, security posture, allowed GPUs, size ceilings and quotas.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=cpc
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.kubernetesVersion`
// +kubebuilder:printcolumn:name="Placement",type=string,JSONPath=`.spec.infrastructure.placement`
// +kubebuilder:printcolumn:name="PodSecurity",type=string,JSONPath=`.spec.podSecurity.level`
// +kubebuilder:printcolumn:name="Internet",type=string,JSONPath=`.spec.egress.internet`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ComputePlaneClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the profile.
	Spec ComputePlaneClassSpec `json:"spec"`
}

// ComputePlaneClassList is a list of ComputePlaneClasses.
// +kubebuilder:object:root=true
type ComputePlaneClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ComputePlaneClass `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ComputePlaneClass{}, &ComputePlaneClassList{})
}
