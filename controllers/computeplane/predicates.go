package computeplane

import (
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// reconcileRequestedPredicate passes updates that change the
// reconcile.fluxcd.io/requestedAt annotation, so `kubectl annotate --overwrite ...
// reconcile.fluxcd.io/requestedAt="$(date +%s)"` forces a reconcile the Flux way.
type reconcileRequestedPredicate struct {
	predicate.Funcs
}

// Update passes a changed request annotation.
func (reconcileRequestedPredicate) Update(e event.UpdateEvent) bool {
	if e.ObjectOld == nil || e.ObjectNew == nil {
		return false
	}
	newVal, ok := meta.ReconcileAnnotationValue(e.ObjectNew.GetAnnotations())
	if !ok {
		return false
	}
	oldVal, _ := meta.ReconcileAnnotationValue(e.ObjectOld.GetAnnotations())
	return newVal != oldVal
}

// Create, Delete and Generic are left to the other predicates.
func (reconcileRequestedPredicate) Create(event.CreateEvent) bool   { return false }
func (reconcileRequestedPredicate) Delete(event.DeleteEvent) bool   { return false }
func (reconcileRequestedPredicate) Generic(event.GenericEvent) bool { return false }

// serviceAccessChanged passes the Service events that can change a grant: a Service
// that carries the opt-in label when created or deleted, and an update that changes
// the label (added, removed: a revocation) or, while labelled, the selector, ports or
// type. Unlabelled Services never wake a plane.
type serviceAccessChanged struct{}

func optedIn(o client.Object) bool {
	_, ok := o.GetLabels()[cpv1.ServiceAccessLabel]
	return ok
}

// Create passes a labelled Service.
func (serviceAccessChanged) Create(e event.CreateEvent) bool { return optedIn(e.Object) }

// Delete passes a labelled Service.
func (serviceAccessChanged) Delete(e event.DeleteEvent) bool { return optedIn(e.Object) }

// Generic passes a labelled Service.
func (serviceAccessChanged) Generic(e event.GenericEvent) bool { return optedIn(e.Object) }

// Update passes the changes above; the label judged on both sides, so opting out counts.
func (serviceAccessChanged) Update(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*corev1.Service)
	n, okNew := e.ObjectNew.(*corev1.Service)
	if !okOld || !okNew {
		return true
	}
	if !optedIn(o) && !optedIn(n) {
		return false
	}
	return o.Labels[cpv1.ServiceAccessLabel] != n.Labels[cpv1.ServiceAccessLabel] ||
		!equality.Semantic.DeepEqual(o.Spec.Selector, n.Spec.Selector) ||
		!equality.Semantic.DeepEqual(o.Spec.Ports, n.Spec.Ports) || o.Spec.Type != n.Spec.Type
}
