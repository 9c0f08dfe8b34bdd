package remote

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"

	"github.com/cozystack/computeplane/remote/posture"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/ssa"
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
	// Foreign lists placement namespaces that exist in the plane without the plane's
	// labels: someone else's (an add-on's, say). They are never adopted: Harden leaves
	// them alone, and the plane is not valid while its spec names one.
	Foreign []string
	// Claimed lists namespaces the class exempts from Pod Security that the operator
	// created for placement releases (posture.WithoutClaimed): never exempted, and the
	// plane is not valid while its class names one.
	Claimed []string
}

// Empty reports whether nothing was found.
func (f Findings) Empty() bool {
	return len(f.PodSecurity) == 0 && len(f.Admission) == 0 && len(f.New) == 0 && len(f.Foreign) == 0 && len(f.Claimed) == 0
}

// Drifted reports whether something the operator applied was removed or changed.
func (f Findings) Drifted() bool { return len(f.PodSecurity) > 0 || len(f.Admission) > 0 }

// Inspect reads the plane and compares it with the posture. It writes nothing.
func Inspect(ctx context.Context, c client.Client, p posture.Posture) (Findings, error) {
	var f Findings
	var namespaces corev1.NamespaceList
	if err := c.List(ctx, &namespaces); err != nil {
		return f, err
	}
	p, f.Claimed = p.WithoutClaimed(namespaces.Items)
	policies := p.Policies()
	matched := make([]bool, len(policies))
	if err := each(policies, func(i int, obj client.Object) (err error) {
		matched[i], err = ssa.Verify(ctx, c, obj, "spec")
		return err
	}); err != nil {
		return f, err
	}
	for i, obj := range policies {
		if !matched[i] {
			f.Admission = append(f.Admission, fmt.Sprintf("%s %s", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName()))
		}
	}
	foreign, err := mutatingPolicies(ctx, c)
	if err != nil {
		return f, err
	}
	f.Admission = append(f.Admission, foreign...)

	seen := map[string]*corev1.Namespace{}
	for i := range namespaces.Items {
		ns := &namespaces.Items[i]
		seen[ns.Name] = ns
		if ns.Status.Phase == corev1.NamespaceTerminating {
			continue
		}
		switch {
		case posture.HasLabels(ns.Labels, p.NamespaceLabels(ns.Name)):
		case !hasAnyPSALabel(ns.Labels) && !p.IsOperatorNamespace(ns.Name):
			f.New = append(f.New, ns.Name)
		default:
			f.PodSecurity = append(f.PodSecurity, "namespace "+ns.Name+" lacks its Pod Security labels")
		}
	}
	for _, obj := range p.PlacementObjects() {
		if ns := seen[obj.GetNamespace()]; ns != nil && p.Foreign(ns) {
			continue
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			if ns := seen[o.Name]; ns != nil && p.Foreign(ns) {
				f.Foreign = append(f.Foreign, o.Name)
				continue
			}
			if ns := seen[o.Name]; ns == nil || ns.Status.Phase != corev1.NamespaceActive {
				f.PodSecurity = append(f.PodSecurity, "placement namespace "+o.Name+" is not Active")
			}
		default:
			ok, err := ssa.Verify(ctx, c, obj)
			if err != nil {
				return f, err
			}
			if !ok {
				f.PodSecurity = append(f.PodSecurity, fmt.Sprintf("%s %s/%s is missing or changed",
					obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName()))
			}
		}
	}
	sort.Strings(f.PodSecurity)
	return f, nil
}

func hasAnyPSALabel(labels map[string]string) bool {
	for _, k := range []string{cpv1.PodSecurityEnforceLabel, cpv1.PodSecurityEnforceVersionLabel, cpv1.PodSecurityAuditLabel, cpv1.PodSecurityAuditVersionLabel, cpv1.PodSecurityWarnLabel, cpv1.PodSecurityWarnVersionLabel} {
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
func Harden(ctx context.Context, c client.Client, p posture.Posture, fieldOwner string) (wrote, labelled []string, err error) {
	var namespaces corev1.NamespaceList
	if err := c.List(ctx, &namespaces); err != nil {
		return wrote, labelled, err
	}
	p, _ = p.WithoutClaimed(namespaces.Items)
	if wrote, err = writePolicies(ctx, c, p, fieldOwner); err != nil {
		return wrote, labelled, err
	}
	live := map[string]*corev1.Namespace{}
	for i := range namespaces.Items {
		live[namespaces.Items[i].Name] = &namespaces.Items[i]
	}
	placement := map[string]bool{}
	for _, obj := range p.PlacementObjects() {
		if l := live[obj.GetNamespace()]; l != nil && p.Foreign(l) {
			continue
		}
		if ns, ok := obj.(*corev1.Namespace); ok {
			l := live[ns.Name]
			if l != nil && p.Foreign(l) {
				// Not the operator's: never adopted (Inspect reports it), labelled for Pod
				// Security like any other namespace below.
				continue
			}
			placement[ns.Name] = true
			// Compare labels, not the applied hash: a relabelled namespace keeps the
			// operator's annotation.
			if l != nil && posture.HasLabels(l.Labels, ns.Labels) {
				continue
			}
			if err := ssa.ForceApply(ctx, c, ns, fieldOwner); err != nil {
				return wrote, labelled, err
			}
			wrote = append(wrote, describe(ns))
			continue
		}
		res, err := ssa.Apply(ctx, c, obj, fieldOwner)
		if err != nil {
			return wrote, labelled, err
		}
		if res.Wrote() {
			wrote = append(wrote, describe(obj))
		}
	}
	for _, ns := range namespaces.Items {
		if placement[ns.Name] || ns.Status.Phase == corev1.NamespaceTerminating || posture.HasLabels(ns.Labels, p.NamespaceLabels(ns.Name)) {
			continue
		}
		var keep map[string]string
		if posture.WasPlacement(&ns) {
			// The mark outlives the namespace's place in the spec: it is what keeps a
			// namespace the tenant's objects live in from being exempted later.
			keep = map[string]string{cpv1.PlacementNamespaceLabel: "true"}
		}
		if err := ssa.ForceApply(ctx, c, p.LabelledNamespace(ns.Name, keep), fieldOwner); err != nil {
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

// WritePolicies applies the posture's admission policies and bindings, all at once, and
// names those it wrote (the rest were as wanted). Harden starts with it; a plane never
// verified gets it before its first read, so that its API server's policy refresh starts
// counting as early as it can.
func WritePolicies(ctx context.Context, c client.Client, p posture.Posture, fieldOwner string) (wrote []string, err error) {
	var namespaces corev1.NamespaceList
	if err := c.List(ctx, &namespaces); err != nil {
		return nil, err
	}
	p, _ = p.WithoutClaimed(namespaces.Items)
	return writePolicies(ctx, c, p, fieldOwner)
}

// writePolicies is WritePolicies for a posture already without claimed exemptions.
func writePolicies(ctx context.Context, c client.Client, p posture.Posture, fieldOwner string) (wrote []string, err error) {
	policies := p.Policies()
	written := make([]bool, len(policies))
	if err := each(policies, func(i int, obj client.Object) error {
		res, err := ssa.Apply(ctx, c, obj, fieldOwner, "spec")
		written[i] = res.Wrote()
		return err
	}); err != nil {
		return nil, err
	}
	for i, obj := range policies {
		if written[i] {
			wrote = append(wrote, describe(obj))
		}
	}
	return wrote, nil
}

func describe(obj client.Object) string {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if obj.GetNamespace() == "" {
		return kind + " " + obj.GetName()
	}
	return kind + " " + obj.GetNamespace() + "/" + obj.GetName()
}

// mutatingPolicies lists the MutatingAdmissionPolicies and their bindings in the plane.
// Kubernetes does not run admission policies on them, so the admission guard cannot
// refuse them; the operator creates none, so any that exists is reported (never
// deleted: the operator removes only what it created). A plane whose API does not serve
// them has none.
func mutatingPolicies(ctx context.Context, c client.Client) ([]string, error) {
	var out []string
	for _, l := range []client.ObjectList{&admissionv1.MutatingAdmissionPolicyList{}, &admissionv1.MutatingAdmissionPolicyBindingList{}} {
		if err := c.List(ctx, l); err != nil {
			if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		kind := strings.TrimSuffix(reflect.TypeOf(l).Elem().Name(), "List")
		_ = apimeta.EachListItem(l, func(o runtime.Object) error {
			out = append(out, fmt.Sprintf("%s %s exists (the operator creates none, and Kubernetes lets no admission policy guard it: remove it from the plane)",
				kind, o.(client.Object).GetName()))
			return nil
		})
	}
	return out, nil
}

// each runs f on every object at once and returns the first error: the policies and
// their bindings are independent objects, and the API server loads new ones on its own
// refresh, so the sooner all are written the sooner they are in force.
func each(objs []client.Object, f func(int, client.Object) error) error {
	errs := make([]error, len(objs))
	var wg sync.WaitGroup
	for i, obj := range objs {
		wg.Go(func() { errs[i] = f(i, obj) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
