package controllers

import (
	"context"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// PatchStatusForTest runs the deferred status patch of a reconcile that observed one
// stage result (Valid False), so tests can see what the patch writes and emits.
func PatchStatusForTest(ctx context.Context, r *ComputePlaneReconciler, p *cpv1.ComputePlane) error {
	s := &scope{plane: p, results: map[string]stageResult{
		cpv1.ValidCondition: stageFalse(cpv1.ClassNotFoundReason, "class %q is missing", p.Spec.ClassName),
	}}
	return r.patchStatus(ctx, s, p.Status.DeepCopy(), nil)
}

// ReleasePlacementFinalizersForTest runs the teardown step that lets placement releases
// go, on releases as a list returned them.
func ReleasePlacementFinalizersForTest(ctx context.Context, r *ComputePlaneReconciler, releases []helmv2.HelmRelease) ([]string, error) {
	return r.releasePlacementFinalizers(ctx, releases)
}

// LeftoverKinds are the kinds a plane's teardown lists and deletes in its namespace.
var LeftoverKinds = leftoverKinds

// ListOwnedForTest lists every object of kind gvk in ns as the teardown and the node
// group pruning read them.
func ListOwnedForTest(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, ns string) ([]client.Object, error) {
	return listOwned(ctx, c, gvk, ns, nil)
}

// RemembersForTest names the reconciler's memos that still hold something of the plane.
func RemembersForTest(r *ComputePlaneReconciler, key client.ObjectKey) []string {
	return r.remembers(key)
}
