package v1alpha1

import "github.com/fluxcd/pkg/apis/meta"

// Condition types. Ready, Reconciling and Stalled follow kstatus (Flux's meta package
// defines them); the others are one per lifecycle stage, in the order the controller
// runs them. Ready is True only when every gating stage is True.
const (
	// ReadyCondition summarises the stages: True only when the plane is provisioned and
	// hardened, and the hardening has been read back.
	ReadyCondition = meta.ReadyCondition
	// ReconcilingCondition is present, True, while the operator is still working.
	ReconcilingCondition = meta.ReconcilingCondition
	// StalledCondition is present, True, when the operator cannot go on without a change
	// from a person (an invalid spec, a conflicting object).
	StalledCondition = meta.StalledCondition

	// ValidCondition: the spec fits its class and is the only ComputePlane in its namespace.
	ValidCondition = "Valid"
	// ProvisionedCondition: the cluster is up and its admin credential usable.
	ProvisionedCondition = "Provisioned"
	// PodSecurityCondition: Pod Security Admission is enforced in the plane.
	PodSecurityCondition = "PodSecurityEnforced"
	// AdmissionCondition: the plane's ValidatingAdmissionPolicies are in place.
	AdmissionCondition = "AdmissionPoliciesReady"
	// EgressCondition: the management-side egress baseline is in place.
	EgressCondition = "EgressHardened"
	// NetworkPoliciesCondition: the policy of the plane's Service grants is exactly what
	// the current grants make (read back). Pending and refused grants do not hold the
	// gate: they open nothing.
	NetworkPoliciesCondition = "NetworkPoliciesReady"
	// IdentitiesCondition: the deployers, the applier and its short-lived kubeconfig
	// exist and were read back.
	IdentitiesCondition = "IdentitiesReady"
)

// GatingConditions are the stage conditions that make up Ready, in lifecycle order.
var GatingConditions = []string{
	ValidCondition,
	ProvisionedCondition,
	PodSecurityCondition,
	AdmissionCondition,
	EgressCondition,
	NetworkPoliciesCondition,
	IdentitiesCondition,
}

// Reasons shared by several conditions.
const (
	// SucceededReason: the stage is done and verified.
	SucceededReason = meta.SucceededReason
	// ProgressingReason: the operator is working on the stage.
	ProgressingReason = meta.ProgressingReason
	// BlockedReason: an earlier stage is not done.
	BlockedReason = "Blocked"
	// DeletingReason: the plane is being torn down.
	DeletingReason = "Deleting"
)

// Reasons of the Reconciling condition while a plane is deleted, one per teardown stage,
// in the order they run (disable, then deprovision).
const (
	// ProtectedReason: placement releases still run in the plane and no one asked for
	// them to be uninstalled (the uninstall-releases annotation): nothing is removed, the
	// applier credential is revoked, and the teardown waits until they are deleted.
	ProtectedReason = "Protected"
	// UninstallingPlacementReason: the placement releases are deleted and Flux
	// uninstalls each from the plane, with the credential still working.
	UninstallingPlacementReason = "UninstallingPlacementReleases"
	// RemovingIdentitiesReason: the applier credential is revoked, and the deployers,
	// the applier and the placement namespaces are removed from the plane.
	RemovingIdentitiesReason = "RemovingIdentities"
	// RemovingEgressReason: the plane's egress policies are removed (the namespace's
	// default deny stays until the namespace goes).
	RemovingEgressReason = "RemovingEgressPolicies"
	// DeletingAddonsReason: the system add-on releases are deleted.
	DeletingAddonsReason = "DeletingAddons"
	// DeletingClusterReason: the Cluster is deleted and Cluster API removes the machines
	// and the control plane.
	DeletingClusterReason = "DeletingCluster"
	// DeletingLeftoversReason: what Cluster API does not own (templates) is deleted.
	DeletingLeftoversReason = "DeletingLeftovers"
	// DeletingNamespaceReason: the dedicated infrastructure namespace is deleted.
	DeletingNamespaceReason = "DeletingNamespace"
)

// UninstallTimedOutReason is the Stalled condition's reason when Flux has not
// uninstalled the placement releases within the class's placementReleases.uninstallTimeout:
// the uninstall credential is revoked, and only a platform operator's abandon goes on.
const UninstallTimedOutReason = "UninstallTimedOut"

// Reasons of the Valid condition.
const (
	// ClassNotFoundReason: spec.className names no ComputePlaneClass. The plane waits and
	// resumes as soon as the class is created.
	ClassNotFoundReason = "ClassNotFound"
	// SpecExceedsClassReason: a knob is outside what the class allows; the message names
	// the field. Terminal until the spec or the class changes.
	SpecExceedsClassReason = "SpecExceedsClass"
	// DuplicateReason: another, older ComputePlane exists in the namespace. Terminal.
	DuplicateReason = "DuplicateInNamespace"
	// NamespaceNotAllowedReason: the class's allowedNamespaces does not select the
	// plane's namespace. Terminal until the class or the namespace's labels change.
	NamespaceNotAllowedReason = "NamespaceNotAllowed"
	// InfrastructureConflictReason: where the plane's infrastructure would go, something
	// the operator did not create for this plane already exists (a namespace it does not
	// own, another plane's objects). The operator never adopts or merges: a person must
	// remove it. Terminal until then.
	InfrastructureConflictReason = "InfrastructureConflict"
	// PlacementNamespaceConflictReason: a namespace spec.placementNamespaces lists
	// already exists in the plane and was not created by the operator for this plane (an
	// add-on's, say). The operator never adopts one (binding the deployer there would hand
	// the tenant what it holds): rename it in the spec, or remove it from the plane.
	// Terminal until then.
	PlacementNamespaceConflictReason = "PlacementNamespaceConflict"
)

// PlacementOpenCondition is informational (not part of Ready): True while placement
// releases are routed into the plane, False while they are held. It is written by the
// placement controller; Ready decides, this condition reports.
const PlacementOpenCondition = "PlacementOpen"

// Reasons of the PlacementOpen condition.
const (
	// RoutedReason: the plane is Ready; placement releases are applied into it.
	RoutedReason = "Routed"
	// HeldReason: the plane is not Ready; placement releases wait (Flux finds no
	// credential and applies nothing anywhere).
	HeldReason = "Held"
)

// VerificationFailedReason is used by every stage: the operator could not read back
// what the stage needs (an error from the management or the plane's API). The stage is
// not True until a read-back succeeds; the message names the failure.
const VerificationFailedReason = "VerificationFailed"

// Reasons of the Provisioned condition, in the order the plane passes them.
const (
	// WaitingForInfrastructureReason: CAPI's Cluster does not report its KubeVirt
	// infrastructure ready yet.
	WaitingForInfrastructureReason = "WaitingForInfrastructure"
	// WaitingForControlPlaneReason: the Kamaji control plane is not Ready yet.
	WaitingForControlPlaneReason = "WaitingForControlPlane"
	// WaitingForKubeconfigReason: Kamaji has not written the admin kubeconfig yet.
	WaitingForKubeconfigReason = "WaitingForKubeconfig"
	// KubeconfigUnusableReason: the admin kubeconfig is not one the operator accepts:
	// anything but inline client certificate, key and CA data for a server the control
	// plane reports (a token, tokenFile, exec, a proxy, a foreign server, ...).
	KubeconfigUnusableReason = "KubeconfigUnusable"
	// RenderFailedReason: the spec cannot be turned into infrastructure (terminal).
	RenderFailedReason = "RenderFailed"
)

// Reasons of the hardening conditions.
const (
	// PlaneUnreachableReason: the plane's API server has not answered for longer than
	// the grace period; the gate stays closed.
	PlaneUnreachableReason = "PlaneUnreachable"
	// DriftedReason: something the operator applied was removed or changed; the message
	// names it, and the operator restores it.
	DriftedReason = "Drifted"
	// NotVerifiedReason: the read-back after applying still found differences.
	NotVerifiedReason = "NotVerified"
	// NotEnforcedReason: the policies read back as written, but the plane's API server
	// does not refuse what they forbid yet (it loads new policies a moment later).
	NotEnforcedReason = "NotEnforced"
)

// IdentitiesFailedReason: the identities could not be applied or verified.
const IdentitiesFailedReason = "IdentitiesNotVerified"
