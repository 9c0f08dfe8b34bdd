package controllers

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// deletionStage tears down one concern. It reports done=false while it waits (its
// message says on what), and errors only for transient failures.
type deletionStage struct {
	name string
	run  func(ctx context.Context, s *scope) (done bool, message string, err error)
}

// reconcileDelete runs the teardown stages in order (disable, then deprovision), one
// visible Deleting step at a time, and releases the finalizer only after the last.
func (r *ComputePlaneReconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.plane
	if !controllerutil.ContainsFinalizer(p, cpv1.ComputePlaneFinalizer) {
		return ctrl.Result{}, nil
	}
	// Later stages (placement releases, credentials, policies, the Cluster) add
	// themselves here, in the order the mission fixes. The gate itself is closed by the
	// Deleting Ready condition the status patch writes before anything is removed.
	var stages []deletionStage
	for _, st := range stages {
		done, msg, err := st.run(ctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !done {
			r.Events.Eventf(p, nil, "Normal", cpv1.DeletingReason, "Delete", "%s: %s", st.name, msg)
			return ctrl.Result{RequeueAfter: r.jitter()}, nil
		}
	}

	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(p, cpv1.ComputePlaneFinalizer)
	if err := r.Patch(ctx, p, patch, client.FieldOwner(FieldOwner)); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s.released = true
	return ctrl.Result{}, nil
}
