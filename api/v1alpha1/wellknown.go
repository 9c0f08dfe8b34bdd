package v1alpha1

// The labels, annotations and finalizers the operator reads or writes: every key it owns,
// one name per meaning, in one place. A key's value is part of the API (clusters carry
// it), so a name may change and its value may not.

// ComputePlaneFinalizer holds a ComputePlane until its teardown has run in order.
const ComputePlaneFinalizer = "computeplane.cozystack.io/finalizer"

// AbandonAnnotation, set on a ComputePlane being deleted (its value says why), lets the
// teardown go past a stage whose cleanup it cannot confirm (the plane's API is gone, an
// uninstall keeps failing, Cluster API is stuck), abandoning what that stage would have
// removed; an event names what. Only someone allowed to update the pseudo-subresource
// computeplanes/abandon may set or change it (a platform operator, never a tenant):
// config/policies enforces that at admission.
const AbandonAnnotation = "computeplane.cozystack.io/abandon"

// UninstallAnnotation, set on a ComputePlane (its value says why), lets it be deleted
// while placement releases still run in it: its teardown then deletes them and has Flux
// uninstall each from the plane. Without it a delete is refused at admission, naming the
// releases, and a delete that gets past admission holds the plane (Reconciling=Protected)
// without uninstalling anything until the releases are gone. Only someone allowed to
// update the pseudo-subresource computeplanes/uninstall may set or change it (the plane's
// owner, computeplane-owner; never the tenant-edit role): config/policies enforces it.
const UninstallAnnotation = "computeplane.cozystack.io/uninstall-releases"

// Placement releases: Flux HelmReleases in a tenant namespace, applied into that
// namespace's ComputePlane and nowhere else.
const (
	// PlacementLabel, set to PlacementLabelValue on a helm.toolkit.fluxcd.io/v2
	// HelmRelease, makes it a placement release: admission routes it into the
	// ComputePlane of its namespace (applier kubeconfig, deployer, a placement
	// namespace) and refuses anything else. Nothing without the label is touched.
	PlacementLabel = "computeplane.cozystack.io/placement"
	// PlacementLabelValue is PlacementLabel's value on a placement release.
	PlacementLabelValue = "ComputePlane"
	// PlacementFinalizer holds a deleted placement release until Flux has uninstalled it
	// from the plane: Flux deletes a release without uninstalling when its kubeConfig
	// Secret is missing (the gate is closed) or it is suspended.
	PlacementFinalizer = "computeplane.cozystack.io/placement"
)

// Labels the operator sets on everything it creates for a plane, so that objects outside
// the plane's namespace (where owner references cannot point) still lead back to it.
const (
	// PlaneNameLabel names the owning ComputePlane.
	PlaneNameLabel = "computeplane.cozystack.io/name"
	// PlaneNamespaceLabel names the owning ComputePlane's namespace.
	PlaneNamespaceLabel = "computeplane.cozystack.io/namespace"
	// PlaneUIDLabel carries the owning ComputePlane's UID. Names can be reused (a plane
	// deleted and created again, two classes with overlapping prefixes); the UID cannot,
	// so it is what marks an object, and above all an infrastructure namespace, as this
	// plane's own.
	PlaneUIDLabel = "computeplane.cozystack.io/uid"
)

// ServiceAccessLabel, set on a Service to the name of its namespace's ComputePlane, is
// the Service owner's half of a grant: the plane's VMs may then reach it on the ports
// the plane asks for in spec.serviceAccess. Removing it revokes the grant.
const ServiceAccessLabel = "computeplane.cozystack.io/plane-access"

// Keys on the objects the operator writes, beside the plane labels above.
const (
	// NodeGroupLabel names a node group on its MachineDeployment, templates and VMs.
	NodeGroupLabel = "computeplane.cozystack.io/node-group"
	// AddonRoleLabel tells an add-on release's role (CNI, Ingress, ...).
	AddonRoleLabel = "computeplane.cozystack.io/addon-role"
	// PolicyRoleLabel tells the operator's CiliumNetworkPolicies apart by what they do.
	PolicyRoleLabel = "computeplane.cozystack.io/policy"
	// PlacementNamespaceLabel marks the namespaces the operator pre-created in a plane
	// for placement. Its key is PlacementLabel's (a label on HelmReleases on the
	// management cluster); the two never label the same kind of object.
	PlacementNamespaceLabel = "computeplane.cozystack.io/placement"
	// UnlabelledPostureLabel is a key no object carries: a selector on it matches
	// nothing (the operator-objects policy of a plane with no labels yet).
	UnlabelledPostureLabel = "computeplane.cozystack.io/unlabelled-posture"
	// ReasonAnnotation documents why a policy exists, on the policy itself.
	ReasonAnnotation = "computeplane.cozystack.io/reason"
	// SuspendedAnnotation marks a placement release the operator suspended because it
	// does not fit its plane (its value is the reason); the operator resumes only those.
	SuspendedAnnotation = "computeplane.cozystack.io/suspended"
)

// AppliedHashAnnotation records the hash of what the operator last applied to an
// object. It decides nothing: the live content does. It tells an update the operator
// made (the hash differs: the wanted content changed) from a repair (the hash is the one
// the operator wrote, yet the content differs: someone changed the object and kept the
// annotation, as `kubectl edit` does).
const AppliedHashAnnotation = "computeplane.cozystack.io/applied-hash"

// Annotations on the kubeconfig Secrets the operator issues tokens into: the applier's,
// and a plane's cluster-autoscaler's.
const (
	// TokenExpiresAtAnnotation is when the token in the Secret expires (RFC 3339).
	TokenExpiresAtAnnotation = "computeplane.cozystack.io/token-expires-at"
	// TokenServiceAccountUIDAnnotation is the UID of the plane's ServiceAccount the token
	// is bound to (the applier's, or the cluster-autoscaler's; the key's value keeps the
	// applier's name it had first).
	TokenServiceAccountUIDAnnotation = "computeplane.cozystack.io/applier-uid"
)

// The discovery beacon. The capabilities design has a provider announce itself on its
// tenant's namespace with a label consumers read, namespace.cozystack.io/capability.
// <capability>: <instance>. The operator sets it on the plane's own namespace while the
// plane is Ready, and takes it away when the gate closes or the plane goes. It is never
// set on any other namespace (a child tenant's included): a release must never find its
// way to another tenant's plane.
const (
	// CapabilityLabelPrefix is the only kind of label the operator may change on a
	// namespace it did not create (config/policies/namespace_guard.yaml).
	CapabilityLabelPrefix = "namespace.cozystack.io/capability."
	// DefaultCapabilityLabel is the beacon's key unless --capability-label says another.
	DefaultCapabilityLabel = CapabilityLabelPrefix + "computeplane"
)

// Kamaji's labels on the kubeconfig Secrets it writes for a TenantControlPlane (v1.0.0
// and 26.8.x: internal/resources/k8s_kubeconfig_resource.go), which the operator reads
// but never writes: its watch of a plane's admin kubeconfig selects on them.
const (
	KamajiComponentLabel = "kamaji.clastix.io/component"
	// KamajiAdminKubeconfigComponent is KamajiComponentLabel's value on the admin
	// kubeconfig Secret.
	KamajiAdminKubeconfigComponent = "admin-kubeconfig"
)

// The operator's mark on everything it creates, on both clusters: its caches and watches
// select on it, and nothing without it is ever changed or deleted.
const (
	// ManagedByLabel is the Kubernetes recommended label; ManagedByValue its value on
	// the operator's objects.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "computeplane-operator"
	// AppNameLabel and AppInstanceLabel name a workload the operator runs (the
	// cluster-autoscaler) and its instance (the plane).
	AppNameLabel     = "app.kubernetes.io/name"
	AppInstanceLabel = "app.kubernetes.io/instance"
)

// Other projects' keys the operator writes or reads, each with that project's meaning.
const (
	// ClusterNameLabel is Cluster API's label naming a machine's or template's Cluster.
	ClusterNameLabel = "cluster.x-k8s.io/cluster-name"
	// ClusterManagedByAnnotation tells Cluster API that another component (Kamaji) keeps
	// an infrastructure cluster's endpoint.
	ClusterManagedByAnnotation = "cluster.x-k8s.io/managed-by"
	// AutoscalerMinSizeAnnotation and AutoscalerMaxSizeAnnotation bound a
	// MachineDeployment for the cluster-autoscaler's Cluster API provider.
	AutoscalerMinSizeAnnotation = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
	AutoscalerMaxSizeAnnotation = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
	// KamajiKubeconfigSecretKeyAnnotation pins the key of the admin kubeconfig Secret
	// Kamaji's Cluster API provider copies into Cluster API's <cluster>-kubeconfig.
	KamajiKubeconfigSecretKeyAnnotation = "kamaji.clastix.io/kubeconfig-secret-key"
	// KamajiNameLabel names the TenantControlPlane on the pods of its control plane.
	KamajiNameLabel = "kamaji.clastix.io/name"
	// ShardKeyLabel assigns an object to a shard, as Flux's objects are assigned: each
	// shard's manager runs with --watch-label-selector naming its keys, and the main one
	// with `!sharding.fluxcd.io/key`.
	ShardKeyLabel = "sharding.fluxcd.io/key"
	// FluxWatchLabel, with FluxWatchLabelValue, makes Flux re-read a Secret as soon as
	// it changes (the applier kubeconfig, rotated).
	FluxWatchLabel      = "reconcile.fluxcd.io/watch"
	FluxWatchLabelValue = "Enabled"
)

// Pod Security Admission's namespace labels, which the operator sets in every plane.
const (
	PodSecurityEnforceLabel        = "pod-security.kubernetes.io/enforce"
	PodSecurityEnforceVersionLabel = "pod-security.kubernetes.io/enforce-version"
	PodSecurityAuditLabel          = "pod-security.kubernetes.io/audit"
	PodSecurityAuditVersionLabel   = "pod-security.kubernetes.io/audit-version"
	PodSecurityWarnLabel           = "pod-security.kubernetes.io/warn"
	PodSecurityWarnVersionLabel    = "pod-security.kubernetes.io/warn-version"
)

// Names of what the operator creates in every plane, which placement releases name.
const (
	// DeployerName is the ServiceAccount Flux impersonates for a placement release (its
	// spec.serviceAccountName), in the plane namespace named like the release's own:
	// Flux impersonates system:serviceaccount:<HelmRelease namespace>:<name>.
	DeployerName = "computeplane-deployer"
	// ApplierKubeconfigSuffix ends the name of a plane's applier kubeconfig Secret
	// (<plane>-applier-kubeconfig) in its tenant namespace, the one operator credential
	// a tenant namespace holds; ApplierKubeconfigKey is its key (the one Flux reads by
	// default).
	ApplierKubeconfigSuffix = "-applier-kubeconfig"
	ApplierKubeconfigKey    = "value"
)
