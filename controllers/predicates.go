package controllers

import (
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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

// serviceAccessChanged passes a Service update that can change a grant: its opt-in
// label, selector, ports or type. (The label predicate before it lets through only
// Services that carry the label before or after.)
type serviceAccessChanged struct{ predicate.Funcs }

// Update passes the changes above.
func (serviceAccessChanged) Update(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*corev1.Service)
	n, okNew := e.ObjectNew.(*corev1.Service)
	if !okOld || !okNew {
		return true
	}
	return o.Labels[cpv1.ServiceAccessLabel] != n.Labels[cpv1.ServiceAccessLabel] ||
		!equality.Semantic.DeepEqual(o.Spec.Selector, n.Spec.Selector) ||
		!equality.Semantic.DeepEqual(o.Spec.Ports, n.Spec.Ports) || o.Spec.Type != n.Spec.Type
}
