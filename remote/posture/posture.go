// Package posture is what the operator wants inside a plane, from its class and spec:
// Pod Security labels, placement namespaces with quota and limits, every admission policy
// with the canary request that proves it in force, and the identities (deployers, the
// applier, the cluster-autoscaler). It is pure: it builds objects and never talks to a
// plane; the parent package remote applies, reads back and proves them.
package posture

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// policyPrefix names every admission policy and binding the operator owns.
const policyPrefix = "computeplane-"

// Posture is what the operator enforces inside one plane, from its class and spec.
type Posture struct {
	// Level and Version of Pod Security enforced outside the exempt namespaces.
	Level, Version string
	// Exempt namespaces run system add-ons at the privileged level.
	Exempt []string
	// Operator is the user name of the operator's credential in the plane: with Trusted,
	// the only identities allowed to change what the policies protect.
	Operator string
	// Trusted are the user names of the add-ons' ServiceAccounts the class names as
	// trusted like the operator (a CA injector); nothing else is.
	Trusted []string
	// PlacementNamespaces are pre-created for placement releases.
	PlacementNamespaces []string
	// Quota and LimitRange of each placement namespace (empty: none).
	Quota      corev1.ResourceList
	LimitRange []corev1.LimitRangeItem
	// Labels link operator-created objects to the ComputePlane.
	Labels map[string]string
}

// NamespaceLabels are the Pod Security labels a namespace of the plane must carry.
// Exempt namespaces are pinned to privileged explicitly (so relabelling them is as
// visible, and as forbidden, as any other), still audited and warned at the class level.
func (p Posture) NamespaceLabels(namespace string) map[string]string {
	enforce := p.Level
	if p.IsExempt(namespace) {
		enforce = "privileged"
	}
	return map[string]string{
		cpv1.PodSecurityEnforceLabel: enforce, cpv1.PodSecurityEnforceVersionLabel: p.Version,
		cpv1.PodSecurityAuditLabel: p.Level, cpv1.PodSecurityAuditVersionLabel: p.Version,
		cpv1.PodSecurityWarnLabel: p.Level, cpv1.PodSecurityWarnVersionLabel: p.Version,
	}
}

// IsExempt reports whether a namespace is on the class's exemption list.
func (p Posture) IsExempt(namespace string) bool {
	for _, e := range p.Exempt {
		if e == namespace {
			return true
		}
	}
	return false
}

// WithoutClaimed is the posture with the class's exemptions that no live namespace
// forbids, and the exempt names it dropped: a namespace the operator created for
// placement releases (it carries PlacementNamespaceLabel, which the operator keeps on it
// after the plane's spec drops it) holds the tenant's objects and service accounts, so
// exempting it later would run them privileged, and trust them like the operator.
// Exemptions are meant for the plane's system namespaces and the add-ons' own. Pure.
func (p Posture) WithoutClaimed(live []corev1.Namespace) (Posture, []string) {
	claimed := map[string]bool{}
	for i := range live {
		if WasPlacement(&live[i]) && p.IsExempt(live[i].Name) {
			claimed[live[i].Name] = true
		}
	}
	if len(claimed) == 0 {
		return p, nil
	}
	var kept, dropped []string
	for _, e := range p.Exempt {
		if claimed[e] {
			dropped = append(dropped, e)
		} else {
			kept = append(kept, e)
		}
	}
	p.Exempt = kept
	return p, dropped
}

// WasPlacement says whether the operator created the namespace for placement releases.
func WasPlacement(ns *corev1.Namespace) bool {
	return ns.Labels[cpv1.PlacementNamespaceLabel] == "true"
}

// LabelledNamespace is the apply object that sets a namespace's Pod Security labels
// (and nothing else: server-side apply leaves every other field to its owner).
func (p Posture) LabelledNamespace(name string, extra map[string]string) *corev1.Namespace {
	ns := &corev1.Namespace{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	ns.Name = name
	ns.Labels = p.NamespaceLabels(name)
	for k, v := range extra {
		ns.Labels[k] = v
	}
	return ns
}

// OperatorNamespaces are namespaces the operator itself keeps in the plane (the
// applier's); they are created labelled like any other.
var OperatorNamespaces = []string{ApplierNamespace}

// IsOperatorNamespace reports whether the operator itself keeps the namespace.
func (p Posture) IsOperatorNamespace(name string) bool {
	for _, n := range OperatorNamespaces {
		if n == name {
			return true
		}
	}
	return false
}

// Foreign says whether a live namespace is a placement namespace the operator did not
// create for this plane: one it creates carries the plane's labels.
func (p Posture) Foreign(ns *corev1.Namespace) bool {
	for _, n := range p.PlacementNamespaces {
		if n == ns.Name {
			return !HasLabels(ns.Labels, p.Labels)
		}
	}
	return false
}

// PlacementObjects are the placement namespaces with their quota and limit range, and
// the operator's own namespaces (with the ServiceAccounts the admission canary's pods
// name: a pod needs an existing ServiceAccount before any policy looks at it).
func (p Posture) PlacementObjects() []client.Object {
	names := append([]string(nil), p.PlacementNamespaces...)
	sort.Strings(names)
	var out []client.Object
	for _, name := range OperatorNamespaces {
		out = append(out, p.LabelledNamespace(name, p.Labels))
	}
	// The canaries' pods run as computeplane-canary (pod hardening) and as a
	// ServiceAccount of the deployer's name (deployer-credentials). Neither has rights or
	// mounts a token, and no one may impersonate them: the applier may impersonate only
	// the deployers of the deployer namespaces, never the operator's own.
	for _, name := range []string{CanaryServiceAccount, cpv1.DeployerName} {
		canary := &corev1.ServiceAccount{AutomountServiceAccountToken: ptr.To(false)}
		canary.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccount"))
		canary.Namespace, canary.Name, canary.Labels = ApplierNamespace, name, p.Labels
		out = append(out, canary)
	}
	for _, name := range names {
		extra := map[string]string{cpv1.PlacementNamespaceLabel: "true"}
		for k, v := range p.Labels {
			extra[k] = v
		}
		out = append(out, p.LabelledNamespace(name, extra))
		if len(p.Quota) > 0 {
			q := &corev1.ResourceQuota{Spec: corev1.ResourceQuotaSpec{Hard: p.Quota}}
			q.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ResourceQuota"))
			q.Namespace, q.Name, q.Labels = name, "computeplane", p.Labels
			out = append(out, q)
		}
		if len(p.LimitRange) > 0 {
			l := &corev1.LimitRange{Spec: corev1.LimitRangeSpec{Limits: p.LimitRange}}
			l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("LimitRange"))
			l.Namespace, l.Name, l.Labels = name, "computeplane", p.Labels
			out = append(out, l)
		}
	}
	return out
}

// HasLabels reports whether have holds every label of want, with its value.
func HasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
