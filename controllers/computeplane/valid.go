package computeplane

import (
	"context"
	"fmt"
	"sort"
	"strings"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

// reconcileValid checks what admission cannot: the class exists, the knobs fit it, and
// this is the namespace's only ComputePlane (the webhook refuses a second one, but two
// creates racing past it are settled here: the older plane wins).
func (r *Reconciler) reconcileValid(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.plane

	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.InNamespace(p.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	if first := tenancy.OldestPlane(planes.Items); first != nil && first.Name != p.Name {
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
	s.namespaceLabels = ns.Labels
	if !tenancy.NamespaceAllowed(class.Spec.AllowedNamespaces, ns.Labels) {
		s.observe(cpv1.ValidCondition, stageTerminal(cpv1.NamespaceNotAllowedReason,
			"ComputePlaneClass %q does not allow namespace %q (spec.allowedNamespaces %s); ask a platform operator for a class this namespace may use",
			class.Name, p.Namespace, tenancy.SelectorString(class.Spec.AllowedNamespaces)))
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

// infrastructureConflict reports (as a message a person can act on) why the plane's
// infrastructure cannot go where its class says: a dedicated namespace that exists but
// was not created for this plane, or another plane's Cluster or egress policies still
// in the namespace. The operator never adopts or merges either.
func (r *Reconciler) infrastructureConflict(ctx context.Context, p *cpv1.ComputePlane, class *cpv1.ComputePlaneClass) (string, error) {
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
