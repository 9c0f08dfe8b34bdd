package controllers

import (
	"github.com/fluxcd/pkg/apis/meta"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
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
