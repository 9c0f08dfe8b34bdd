package placement

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// patchStatus writes status.placement and the PlacementOpen condition (server-side
// apply, as the placement controller's field manager: the ComputePlane controller owns
// the rest), only when they changed.
func (r *Reconciler) patchStatus(ctx context.Context, p *cpv1.ComputePlane, g gate, counts cpv1.PlacementCounts) error {
	conds := append([]metav1.Condition(nil), p.Status.Conditions...)
	cond := placementCondition(g, counts)
	cond.ObservedGeneration = p.Generation
	apimeta.SetStatusCondition(&conds, cond)
	now := apimeta.FindStatusCondition(conds, cpv1.PlacementOpenCondition)
	if p.Status.Placement != nil && equality.Semantic.DeepEqual(*p.Status.Placement, counts) &&
		equality.Semantic.DeepEqual(apimeta.FindStatusCondition(p.Status.Conditions, cpv1.PlacementOpenCondition), now) {
		return nil
	}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cpv1.ComputePlaneStatus{
		Placement: &counts, Conditions: []metav1.Condition{*now},
	})
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetGroupVersionKind(cpv1.GroupVersion.WithKind("ComputePlane"))
	u.SetName(p.Name)
	u.SetNamespace(p.Namespace)
	err = r.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// placementCondition is the PlacementOpen condition for a gate and its releases. It is
// pure.
func placementCondition(g gate, c cpv1.PlacementCounts) metav1.Condition {
	cond := metav1.Condition{Type: cpv1.PlacementOpenCondition}
	switch {
	case g.open:
		cond.Status, cond.Reason = metav1.ConditionTrue, cpv1.RoutedReason
		cond.Message = fmt.Sprintf("%d placement release(s) routed into the plane; new ones are applied at once", c.Routed)
	default:
		cond.Status, cond.Reason = metav1.ConditionFalse, cpv1.HeldReason
		cond.Message = fmt.Sprintf("%d placement release(s) held: %s", c.Held, g.why)
	}
	if c.Refused > 0 {
		cond.Message += fmt.Sprintf("; %d labelled for placement but not routed (see their NotRouted events)", c.Refused)
	}
	if c.Uninstalling > 0 {
		cond.Message += fmt.Sprintf("; %d deleted, waiting to be uninstalled from the plane", c.Uninstalling)
	}
	return cond
}
