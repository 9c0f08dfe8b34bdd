package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
)

// reconcileValid checks what admission cannot: the class exists, the knobs fit it, and
// this is the namespace's only ComputePlane (the webhook refuses a second one, but two
// creates racing past it are settled here: the older plane wins).
func (r *ComputePlaneReconciler) reconcileValid(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.plane

	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.InNamespace(p.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	if first := oldestPlane(planes.Items); first != nil && first.Name != p.Name {
		s.observe(cpv1.ValidCondition, stageInvalid(cpv1.DuplicateReason,
			"ComputePlane %q already serves namespace %q; at most one ComputePlane per namespace is allowed, delete this one",
			first.Name, p.Namespace))
		return ctrl.Result{}, nil
	}

	class := &cpv1.ComputePlaneClass{}
	if err := r.Get(ctx, client.ObjectKey{Name: p.Spec.ClassName}, class); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		// Not terminal: the class watch resumes the plane as soon as the class exists.
		s.observe(cpv1.ValidCondition, stageFalse(cpv1.ClassNotFoundReason,
			"ComputePlaneClass %q does not exist; ask a platform operator to create it or set spec.className to an existing class",
			p.Spec.ClassName))
		return ctrl.Result{}, nil
	}
	s.class = class

	ns := &corev1.Namespace{}
	if err := r.Get(ctx, client.ObjectKey{Name: p.Namespace}, ns); err != nil {
		return ctrl.Result{}, err
	}
	if !namespaceAllowed(class.Spec.AllowedNamespaces, ns.Labels) {
		s.observe(cpv1.ValidCondition, stageTerminal(cpv1.NamespaceNotAllowedReason,
			"ComputePlaneClass %q does not allow namespace %q (spec.allowedNamespaces %s); ask a platform operator for a class this namespace may use",
			class.Name, p.Namespace, selectorString(class.Spec.AllowedNamespaces)))
		return ctrl.Result{}, nil
	}

	if pl := class.Spec.Infrastructure.Placement; pl != "" && pl != cpv1.DedicatedNamespace {
		// Stored before the mode was removed: moving the infrastructure would orphan it,
		// keeping it in the tenant namespace leaves its credentials nameable by tenants.
		s.observe(cpv1.ValidCondition, stageTerminal(cpv1.SpecExceedsClassReason,
			"ComputePlaneClass %q places infrastructure %q, which is no longer supported (tenant objects could name the plane's admin credential there); ask a platform operator for a class with DedicatedNamespace placement",
			class.Name, pl))
		return ctrl.Result{}, nil
	}
	if errs := checkAgainstClass(p.Namespace, &p.Spec, &class.Spec); len(errs) > 0 {
		s.observe(cpv1.ValidCondition, stageInvalid(cpv1.SpecExceedsClassReason,
			"%s (class %q); change the spec or ask for a class that allows it", errs.ToAggregate().Error(), class.Name))
		return ctrl.Result{}, nil
	}
	if conflict, err := r.infrastructureConflict(ctx, p, class); err != nil || conflict != "" {
		if conflict != "" {
			s.observe(cpv1.ValidCondition, stageTerminal(cpv1.InfrastructureConflictReason, "%s", conflict))
		}
		// Looked at again when the namespace changes, and periodically.
		return ctrl.Result{RequeueAfter: r.jitter()}, err
	}
	s.observe(cpv1.ValidCondition, stageTrue(cpv1.SucceededReason,
		fmt.Sprintf("The spec fits class %q", class.Name)))
	return ctrl.Result{}, nil
}

// namespaceAllowed reports whether a class's allowedNamespaces selects a namespace with
// these labels. Unset selects nothing; an empty selector selects everything.
func namespaceAllowed(sel *metav1.LabelSelector, nsLabels map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(nsLabels))
}

func selectorString(sel *metav1.LabelSelector) string {
	if sel == nil {
		return "is unset, which allows no namespace"
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return "is malformed: " + err.Error()
	}
	if s.Empty() {
		return "allows every namespace"
	}
	return "selects " + s.String()
}

// infrastructureConflict reports (as a message a person can act on) why the plane's
// infrastructure cannot go where its class says: a dedicated namespace that exists but
// was not created for this plane, or another plane's Cluster or egress policies still
// in the namespace. The operator never adopts or merges either.
func (r *ComputePlaneReconciler) infrastructureConflict(ctx context.Context, p *cpv1.ComputePlane, class *cpv1.ComputePlaneClass) (string, error) {
	infraNS := render.InfrastructureNamespace(p, class)
	ns := &corev1.Namespace{}
	switch err := r.Get(ctx, client.ObjectKey{Name: infraNS}, ns); {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", err
	}
	if ns.Labels[cpv1.PlaneUIDLabel] != string(p.UID) {
		return fmt.Sprintf("namespace %s exists but was not created for this ComputePlane (its %s label is %q, this plane's UID is %s); "+
			"the operator never adopts a namespace: a platform operator must check what it holds and delete or rename it",
			infraNS, cpv1.PlaneUIDLabel, ns.Labels[cpv1.PlaneUIDLabel], p.UID), nil
	}
	others, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: cpv1.PlaneNameLabel, Operator: metav1.LabelSelectorOpExists},
		{Key: cpv1.PlaneUIDLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{string(p.UID)}},
	}})
	if err != nil {
		return "", err
	}
	var clusters clusterv1.ClusterList
	if err := r.List(ctx, &clusters, client.InNamespace(infraNS), client.MatchingLabelsSelector{Selector: others}); err != nil {
		return "", err
	}
	var policies ciliumv2.CiliumNetworkPolicyList
	if err := r.List(ctx, &policies, client.InNamespace(infraNS), client.MatchingLabelsSelector{Selector: others}); err != nil {
		return "", err
	}
	var found []string
	for _, c := range clusters.Items {
		found = append(found, fmt.Sprintf("Cluster %s (ComputePlane %s/%s, uid %s)", c.Name, c.Labels[cpv1.PlaneNamespaceLabel], c.Labels[cpv1.PlaneNameLabel], c.Labels[cpv1.PlaneUIDLabel]))
	}
	for _, c := range policies.Items {
		found = append(found, fmt.Sprintf("CiliumNetworkPolicy %s (ComputePlane %s/%s, uid %s)", c.Name, c.Labels[cpv1.PlaneNamespaceLabel], c.Labels[cpv1.PlaneNameLabel], c.Labels[cpv1.PlaneUIDLabel]))
	}
	if len(found) == 0 {
		return "", nil
	}
	sort.Strings(found)
	return fmt.Sprintf("namespace %s still holds another ComputePlane's infrastructure: %s; that plane was removed without its teardown and its VMs may still run. "+
		"The operator never merges planes: a platform operator must delete that infrastructure first", infraNS, strings.Join(found, ", ")), nil
}

// oldestPlane returns the plane created first (by name on a tie), ignoring planes being
// deleted, or nil.
func oldestPlane(planes []cpv1.ComputePlane) *cpv1.ComputePlane {
	live := make([]*cpv1.ComputePlane, 0, len(planes))
	for i := range planes {
		if planes[i].DeletionTimestamp.IsZero() {
			live = append(live, &planes[i])
		}
	}
	if len(live) == 0 {
		return nil
	}
	sort.Slice(live, func(i, j int) bool {
		ti, tj := live[i].CreationTimestamp, live[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return live[i].Name < live[j].Name
	})
	return live[0]
}

func (r *ComputePlaneReconciler) planesOfClass(ctx context.Context, o client.Object) []ctrl.Request {
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.MatchingFields{classNameField: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of a class", "class", o.GetName())
		return nil
	}
	return requestsFor(planes.Items, "")
}

func (r *ComputePlaneReconciler) otherPlanesInNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of a namespace", "namespace", o.GetNamespace())
		return nil
	}
	return requestsFor(planes.Items, o.GetName())
}

func requestsFor(planes []cpv1.ComputePlane, except string) []ctrl.Request {
	reqs := make([]ctrl.Request, 0, len(planes))
	for _, p := range planes {
		if p.Name != except {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
		}
	}
	return reqs
}

// planeFromLabels maps an object the operator created to its plane.
func planeFromLabels(_ context.Context, o client.Object) []ctrl.Request {
	l := o.GetLabels()
	name, ns := l[cpv1.PlaneNameLabel], l[cpv1.PlaneNamespaceLabel]
	if name == "" || ns == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}}
}

// planesOfInfraNamespace maps a provider-created object to the plane whose
// infrastructure namespace holds it.
func (r *ComputePlaneReconciler) planesOfInfraNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.MatchingFields{infraNSField: o.GetNamespace()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of an infrastructure namespace", "namespace", o.GetNamespace())
		return nil
	}
	return requestsFor(planes.Items, "")
}

// planesOfNamespace maps a namespace to the planes in it and the planes whose
// infrastructure namespace it is.
func (r *ComputePlaneReconciler) planesOfNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	var in, infra cpv1.ComputePlaneList
	if err := r.List(ctx, &in, client.InNamespace(o.GetName())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of a namespace", "namespace", o.GetName())
		return nil
	}
	if err := r.List(ctx, &infra, client.MatchingFields{infraNSField: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of an infrastructure namespace", "namespace", o.GetName())
		return nil
	}
	return append(requestsFor(in.Items, ""), requestsFor(infra.Items, "")...)
}

// planesInNamespace maps an object to the planes of its namespace.
func (r *ComputePlaneReconciler) planesInNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of a namespace", "namespace", o.GetNamespace())
		return nil
	}
	return requestsFor(planes.Items, "")
}
