package computeplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// ownedConditions are the condition types this reconciler writes. Other controllers (the
// placement controller) own theirs; server-side apply keeps each one's list entries.
var ownedConditions = append([]string{cpv1.ReadyCondition, cpv1.ReconcilingCondition, cpv1.StalledCondition},
	cpv1.GatingConditions...)

// patchStatus is the one place that writes a ComputePlane's status. It derives the
// summary conditions, moves observedGeneration only when the reconcile ended (cleanly or
// terminally, not while waiting), echoes the reconcile request, emits an event per
// condition transition, and applies the owned fields only when they changed.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope, before *cpv1.ComputePlaneStatus, retErr error) error {
	if s.released {
		observeTransitions(s.plane, before, time.Now())
		return r.signalCapability(ctx, s.plane.Namespace, s.plane.Name, false)
	}
	p := s.plane
	deleting := !p.DeletionTimestamp.IsZero()
	summarize(&p.Status.Conditions, p.Generation, s.results, deleting, s.deleting)

	terminal := retErr != nil && errors.Is(retErr, reconcile.TerminalError(nil))
	if (retErr == nil && !s.waiting) || terminal {
		p.Status.ObservedGeneration = p.Generation
	}
	if v, ok := meta.ReconcileAnnotationValue(p.GetAnnotations()); ok {
		p.Status.LastHandledReconcileAt = v
	}

	// The beacon follows the status as written: announced only once Ready is stored,
	// taken away at once when it is not.
	ready := !deleting && apimeta.IsStatusConditionTrue(p.Status.Conditions, cpv1.ReadyCondition)
	after := ownedStatus(&p.Status)
	if equality.Semantic.DeepEqual(ownedStatus(before), after) {
		return r.signalCapability(ctx, p.Namespace, p.Name, ready)
	}
	if !ready {
		if err := r.signalCapability(ctx, p.Namespace, p.Name, false); err != nil {
			return err
		}
	}
	written, err := applyStatus(ctx, r.Client, p, after)
	if err != nil || !written {
		return err
	}
	if ready {
		if err := r.signalCapability(ctx, p.Namespace, p.Name, true); err != nil {
			return err
		}
	}
	r.state.wrote(client.ObjectKeyFromObject(p), p.ResourceVersion, time.Now())
	// Only what was written is news: a failed patch is retried, and its transitions
	// are reported then.
	r.recordTransitions(p, before.Conditions)
	observeTransitions(p, before, time.Now())
	return nil
}

// ownedStatus is the part of a status this reconciler applies.
func ownedStatus(st *cpv1.ComputePlaneStatus) *cpv1.ComputePlaneStatus {
	out := st.DeepCopy()
	out.Placement = nil
	out.Conditions = nil
	for _, t := range ownedConditions {
		if c := apimeta.FindStatusCondition(st.Conditions, t); c != nil {
			out.Conditions = append(out.Conditions, *c)
		}
	}
	return out
}

// applyStatus applies the status and reports whether it was written: a plane deleted
// meanwhile has nothing left to report on, which is not an error.
func applyStatus(ctx context.Context, c client.Client, p *cpv1.ComputePlane, st *cpv1.ComputePlaneStatus) (bool, error) {
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil {
		return false, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetGroupVersionKind(cpv1.GroupVersion.WithKind("ComputePlane"))
	u.SetName(p.Name)
	u.SetNamespace(p.Namespace)
	err = c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("patching status: %w", err)
	}
	return true, nil
}

// recordTransitions emits one event per owned condition whose status or reason changed to
// a verdict (True or False); stages merely Blocked behind another are not news. A
// condition going False while the plane is Stalled is a Warning; the rest are Normal.
func (r *Reconciler) recordTransitions(p *cpv1.ComputePlane, before []metav1.Condition) {
	stalled := apimeta.IsStatusConditionTrue(p.Status.Conditions, cpv1.StalledCondition)
	for _, t := range append([]string{cpv1.ReadyCondition}, cpv1.GatingConditions...) {
		now := apimeta.FindStatusCondition(p.Status.Conditions, t)
		if now == nil || now.Status == metav1.ConditionUnknown {
			continue
		}
		if old := apimeta.FindStatusCondition(before, t); old != nil && old.Status == now.Status && old.Reason == now.Reason {
			continue
		}
		eventType := corev1.EventTypeNormal
		if stalled && now.Status == metav1.ConditionFalse {
			eventType = corev1.EventTypeWarning
		}
		r.Events.Eventf(p, nil, eventType, now.Reason, "ConditionChanged", "%s=%s: %s", t, now.Status, now.Message)
	}
}
