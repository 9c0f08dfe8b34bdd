package controllers

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/controllers/render"
)

// Nodes that heal and scale: a MachineHealthCheck per node group, and the
// cluster-autoscaler (ServiceAccount, RoleBinding of the shipped autoscaler ClusterRole,
// Deployment) while a group autoscales. They are applied with the rest of the graph
// (render.Plane), pruned here when their group or the last autoscaled group goes, and
// removed at teardown: the autoscaler with the add-ons (before the Cluster, so nothing
// scales what Cluster API is deleting), the health checks with the leftovers.
//
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machinehealthchecks,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=computeplane-cluster-autoscaler

// healthCheckKinds are the (list) kinds of the node groups' health checks.
var healthCheckKinds = []schema.GroupVersionKind{clusterv1.GroupVersion.WithKind("MachineHealthCheckList")}

// autoscalerKinds are the (list) kinds of a plane's autoscaler, in deletion order: the
// Deployment (its pods) before the rights they use.
var autoscalerKinds = []schema.GroupVersionKind{
	appsv1.SchemeGroupVersion.WithKind("DeploymentList"),
	rbacv1.SchemeGroupVersion.WithKind("RoleBindingList"),
	corev1.SchemeGroupVersion.WithKind("ServiceAccountList"),
}

// pruneHealthAndScale deletes the health checks of node groups that are gone, and the
// autoscaler once no group autoscales.
func (r *ComputePlaneReconciler) pruneHealthAndScale(ctx context.Context, s *scope, graph *render.Graph) error {
	keep := sets.New[string]()
	for _, g := range graph.NodeGroups {
		keep.Insert(g.HealthCheck.Name)
	}
	if _, err := r.deleteOwned(ctx, s, healthCheckKinds, keep); err != nil {
		return err
	}
	keep = sets.New[string]()
	for _, o := range graph.Autoscaler {
		keep.Insert(o.GetName())
	}
	_, err := r.deleteOwned(ctx, s, autoscalerKinds, keep)
	return err
}

// deleteAutoscaler removes the plane's autoscaler and reports what is still going.
func (r *ComputePlaneReconciler) deleteAutoscaler(ctx context.Context, s *scope) (stageWait, error) {
	n, err := r.deleteOwned(ctx, s, autoscalerKinds, nil)
	if err != nil || n == 0 {
		return stageWait{done: err == nil}, err
	}
	return stageWait{message: fmt.Sprintf("waiting for the cluster-autoscaler's %d object(s) in %s to go", n, s.plane.Status.InfrastructureNamespace)}, nil
}

// deleteOwned deletes the plane's objects of kinds in its infrastructure namespace whose
// names keep does not hold, and returns how many it found deleting or deleted.
func (r *ComputePlaneReconciler) deleteOwned(ctx context.Context, s *scope, kinds []schema.GroupVersionKind, keep sets.Set[string]) (int, error) {
	ns := s.plane.Status.InfrastructureNamespace
	if ns == "" {
		return 0, nil
	}
	gone := 0
	for _, gvk := range kinds {
		items, err := listOwned(ctx, r.Client, gvk, ns, s.planeSelector())
		if err != nil {
			return gone, err
		}
		for _, o := range items {
			if keep.Has(o.GetName()) {
				continue
			}
			gone++
			if o.GetDeletionTimestamp().IsZero() {
				if err := client.IgnoreNotFound(r.Delete(ctx, o)); err != nil {
					return gone, err
				}
			}
		}
	}
	return gone, nil
}
