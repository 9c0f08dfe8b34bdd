package remote

import (
	"context"
	"fmt"
	"sort"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Findings are what a look at a plane found wrong, per stage; empty means verified.
type Findings struct {
	// PodSecurity lists namespaces whose Pod Security labels are missing or wrong, and
	// placement namespaces (or their quota and limits) that are missing or not Active.
	PodSecurity []string
	// Admission lists policies and bindings that are missing or changed.
	Admission []string
	// New lists namespaces without any Pod Security label: created since the last look,
	// to be labelled. They are not drift.
	New []string
}

// Empty reports whether nothing was found.
func (f Findings) Empty() bool {
	return len(f.PodSecurity) == 0 && len(f.Admission) == 0 && len(f.New) == 0
}

// Drifted reports whether something the operator applied was removed or changed.
func (f Findings) Drifted() bool { return len(f.PodSecurity) > 0 || len(f.Admission) > 0 }

// Inspect reads the plane and compares it with the posture. It writes nothing.
func Inspect(ctx context.Context, c client.Client, p Posture) (Findings, error) {
	var f Findings
	for _, obj := range p.Policies() {
		ok, err := policyMatches(ctx, c, obj)
		if err != nil {
			return f, err
		}
		if !ok {
			f.Admission = append(f.Admission, fmt.Sprintf("%s %s", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName()))
		}
	}

	var namespaces corev1.NamespaceList
	if err := c.List(ctx, &namespaces); err != nil {
		return f, err
	}
	seen := map[string]*corev1.Namespace{}
	for i := range namespaces.Items {
		ns := &namespaces.Items[i]
		seen[ns.Name] = ns
		if ns.Status.Phase == corev1.NamespaceTerminating {
			continue
		}
		switch {
		case hasLabels(ns.Labels, p.NamespaceLabels(ns.Name)):
		case !hasAnyPSALabel(ns.Labels) && !p.isOperatorNamespace(ns.Name):
			f.New = append(f.New, ns.Name)
		default:
			f.PodSecurity = append(f.PodSecurity, "namespace "+ns.Name+" lacks its Pod Security labels")
		}
	}
	for _, obj := range p.PlacementObjects() {
		switch o := obj.(type) {
		case *corev1.Namespace:
			if ns := seen[o.Name]; ns == nil || ns.Status.Phase != corev1.NamespaceActive {
				f.PodSecurity = append(f.PodSecurity, "placement namespace "+o.Name+" is not Active")
			}
		default:
			err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
			if apierrors.IsNotFound(err) {
				f.PodSecurity = append(f.PodSecurity, fmt.Sprintf("%s %s/%s is missing",
					obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName()))
			} else if err != nil {
				return f, err
			}
		}
	}
	sort.Strings(f.PodSecurity)
	return f, nil
}

func hasAnyPSALabel(labels map[string]string) bool {
	for _, k := range []string{PSAEnforce, PSAEnforceVersion, PSAAudit, PSAAuditVersion, PSAWarn, PSAWarnVersion} {
		if _, ok := labels[k]; ok {
			return true
		}
	}
	return false
}

// Harden applies the posture: policies first (so nothing slips in while namespaces are
// labelled), then placement namespaces with quota and limits, then the Pod Security
// labels of every other namespace. Only what differs is written; it returns what it
// restored or created (by kind and name) apart from the namespaces it labelled for the
// first time.
func Harden(ctx context.Context, c client.Client, p Posture, fieldOwner string) (wrote, labelled []string, err error) {
	for _, obj := range p.Policies() {
		ok, err := policyMatches(ctx, c, obj)
		if err != nil {
			return wrote, labelled, err
		}
		if !ok {
			if err := forceApply(ctx, c, obj, fieldOwner); err != nil {
				return wrote, labelled, err
			}
			wrote = append(wrote, describe(obj))
		}
	}
	var namespaces corev1.NamespaceList
	if err := c.List(ctx, &namespaces); err != nil {
		return wrote, labelled, err
	}
	live := map[string]*corev1.Namespace{}
	for i := range namespaces.Items {
		live[namespaces.Items[i].Name] = &namespaces.Items[i]
	}
	placement := map[string]bool{}
	for _, obj := range p.PlacementObjects() {
		if ns, ok := obj.(*corev1.Namespace); ok {
			// Compare labels, not the applied hash: a relabelled namespace keeps the
			// operator's annotation.
			placement[ns.Name] = true
			if l := live[ns.Name]; l != nil && hasLabels(l.Labels, ns.Labels) {
				continue
			}
			if err := forceApply(ctx, c, ns, fieldOwner); err != nil {
				return wrote, labelled, err
			}
			wrote = append(wrote, describe(ns))
			continue
		}
		changed, err := ApplyIfChanged(ctx, c, obj, fieldOwner)
		if err != nil {
			return wrote, labelled, err
		}
		if changed {
			wrote = append(wrote, describe(obj))
		}
	}
	for _, ns := range namespaces.Items {
		if placement[ns.Name] || ns.Status.Phase == corev1.NamespaceTerminating || hasLabels(ns.Labels, p.NamespaceLabels(ns.Name)) {
			continue
		}
		if err := forceApply(ctx, c, p.LabelledNamespace(ns.Name, nil), fieldOwner); err != nil {
			return wrote, labelled, err
		}
		if hasAnyPSALabel(ns.Labels) {
			wrote = append(wrote, "Namespace "+ns.Name)
		} else {
			labelled = append(labelled, ns.Name)
		}
	}
	return wrote, labelled, nil
}

func describe(obj client.Object) string {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if obj.GetNamespace() == "" {
		return kind + " " + obj.GetName()
	}
	return kind + " " + obj.GetNamespace() + "/" + obj.GetName()
}

// policyMatches reports whether a policy or binding exists and says what the operator
// wants (the fields that decide admission; the server defaults the rest).
func policyMatches(ctx context.Context, c client.Client, want client.Object) (bool, error) {
	live := want.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(want), live); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if !live.GetDeletionTimestamp().IsZero() {
		return false, nil
	}
	switch w := want.(type) {
	case *admissionv1.ValidatingAdmissionPolicy:
		l := live.(*admissionv1.ValidatingAdmissionPolicy)
		return equality.Semantic.DeepEqual(w.Spec.Validations, l.Spec.Validations) &&
			equality.Semantic.DeepEqual(w.Spec.MatchConditions, l.Spec.MatchConditions) &&
			equality.Semantic.DeepEqual(w.Spec.FailurePolicy, l.Spec.FailurePolicy) &&
			l.Spec.MatchConstraints != nil &&
			equality.Semantic.DeepEqual(w.Spec.MatchConstraints.ResourceRules, l.Spec.MatchConstraints.ResourceRules) &&
			equality.Semantic.DeepEqual(w.Spec.MatchConstraints.NamespaceSelector, emptyToNil(l.Spec.MatchConstraints.NamespaceSelector)), nil
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		l := live.(*admissionv1.ValidatingAdmissionPolicyBinding)
		return w.Spec.PolicyName == l.Spec.PolicyName &&
			equality.Semantic.DeepEqual(w.Spec.ValidationActions, l.Spec.ValidationActions) &&
			l.Spec.ParamRef == nil && emptySelector(l.Spec.MatchResources), nil
	}
	return false, fmt.Errorf("not a policy: %T", want)
}

func forceApply(ctx context.Context, c client.Client, obj client.Object, fieldOwner string) error {
	u, err := toApplyObject(obj)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
