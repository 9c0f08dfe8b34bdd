package controllers

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/ssa"
)

// Nodes that heal and scale: a MachineHealthCheck per node group, and the
// cluster-autoscaler (ServiceAccount, RoleBinding of the shipped autoscaler ClusterRole,
// Deployment, and the kubeconfig Secret of its own identity in the plane) while a group
// autoscales. The health checks are applied with the rest of the graph (render.Plane),
// pruned here when their group goes, and removed with the leftovers at teardown. The
// autoscaler is kept by the identities stage (reconcileAutoscaler: it needs a verified
// plane for its identity there), removed when no group autoscales any more, and at
// teardown with the add-ons (before the Cluster, so nothing scales what Cluster API is
// deleting).
//
// A Deployment creator can run any pod as any ServiceAccount of its namespace, so the
// operator holds no right on Deployments or ServiceAccounts cluster-wide: it takes them
// in a plane's infrastructure namespace only (autoscalerRights, bound on first refusal,
// as its Secret rights), and reads those objects from the API server (an informer would
// need them cluster-wide). Someone who changes the Deployment sees it put back at the
// plane's next full read (a resync at the latest), not at once: nothing watches it.
//
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machinehealthchecks,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=computeplane-cluster-autoscaler
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=computeplane-autoscaler-manager

// AutoscalerManagerRole is the ClusterRole config/rbac ships with what the operator
// needs to write a plane's cluster-autoscaler (Deployments, ServiceAccounts, the
// autoscaler's RoleBinding), which it binds to itself in infrastructure namespaces
// only, with a RoleBinding of the same name.
const AutoscalerManagerRole = "computeplane-autoscaler-manager"

// autoscalerRights are the operator's rights on the autoscaler's objects.
var autoscalerRights = namespacedRights{Role: AutoscalerManagerRole, Binding: AutoscalerManagerRole}

// healthCheckKinds are the (list) kinds of the node groups' health checks.
var healthCheckKinds = []schema.GroupVersionKind{clusterv1.GroupVersion.WithKind("MachineHealthCheckList")}

// pruneHealthChecks deletes the health checks of node groups that are gone.
func (r *ComputePlaneReconciler) pruneHealthChecks(ctx context.Context, s *scope, graph *render.Graph) error {
	keep := sets.New[string]()
	for _, g := range graph.NodeGroups {
		keep.Insert(g.HealthCheck.Name)
	}
	return r.deleteOwned(ctx, s, healthCheckKinds, keep)
}

// applyAutoscaler writes the autoscaler's objects (server-side apply, skipped when they
// read as wanted) with the operator's rights in the infrastructure namespace, and says
// which it restored.
func (r *ComputePlaneReconciler) applyAutoscaler(ctx context.Context, objs []client.Object) ([]string, error) {
	c := uncached{Client: r.Client, reader: r.APIReader}
	var restored []string
	for _, obj := range objs {
		var res ssa.ApplyResult
		if err := r.withRights(ctx, autoscalerRights, obj.GetNamespace(), func() error {
			var err error
			res, err = r.comparisons().Apply(ctx, c, obj, FieldOwner)
			return err
		}); err != nil {
			return restored, err
		}
		if res == ssa.Restored {
			restored = append(restored, fmt.Sprintf("%s %s/%s", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName()))
		}
	}
	return restored, nil
}

// deleteAutoscaler removes the plane's autoscaler from its infrastructure namespace
// (the Deployment first, then its rights and its kubeconfig), then the operator's rights
// there, and reports what is still going. A plane that never autoscaled costs two reads
// of RoleBindings and one of the Secret, and takes no right.
func (r *ComputePlaneReconciler) deleteAutoscaler(ctx context.Context, s *scope) (stageWait, error) {
	p := s.plane
	ns := p.Status.InfrastructureNamespace
	if ns == "" {
		return stageWait{done: true}, nil
	}
	if present, err := r.autoscalerMayExist(ctx, s); err != nil || !present {
		if err != nil {
			return stageWait{}, err
		}
		return stageWait{done: true}, r.deleteAutoscalerKubeconfig(ctx, s)
	}
	key := client.ObjectKey{Namespace: ns, Name: render.AutoscalerName(p)}
	going := 0
	for _, o := range []client.Object{&appsv1.Deployment{}, &rbacv1.RoleBinding{}, &corev1.ServiceAccount{}} {
		err := r.withRights(ctx, autoscalerRights, ns, func() error {
			if err := r.APIReader.Get(ctx, key, o); err != nil {
				return err
			}
			if !labels.SelectorFromSet(render.PlaneSelector(p)).Matches(labels.Set(o.GetLabels())) {
				return nil // not this plane's: never deleted
			}
			if o.GetDeletionTimestamp().IsZero() {
				if err := r.Delete(ctx, o); err != nil {
					return err
				}
				// Gone at once unless something holds it (a finalizer).
				if err := r.APIReader.Get(ctx, key, o); err != nil {
					return err
				}
			}
			going++
			return nil
		})
		switch {
		case apierrors.IsNotFound(err), errors.Is(err, errNamespaceTerminating):
		case err != nil:
			return stageWait{}, err
		}
	}
	if going > 0 {
		return stageWait{message: fmt.Sprintf("waiting for the cluster-autoscaler's %d object(s) in %s to go", going, ns)}, nil
	}
	if err := r.deleteAutoscalerKubeconfig(ctx, s); err != nil {
		return stageWait{}, err
	}
	return stageWait{done: true}, r.dropRights(ctx, autoscalerRights, ns)
}

// autoscalerMayExist says whether the operator may have made an autoscaler in the
// plane's infrastructure namespace: it holds its rights there, or the autoscaler's
// RoleBinding is there. Without either nothing of it can act (the RoleBinding is its
// only right on the management cluster; its plane identity goes with the identities),
// and there is nothing the operator could delete without first taking rights.
func (r *ComputePlaneReconciler) autoscalerMayExist(ctx context.Context, s *scope) (bool, error) {
	ns := s.plane.Status.InfrastructureNamespace
	if held, err := r.holdsRights(ctx, autoscalerRights, ns); err != nil || held {
		return held, err
	}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.AutoscalerName(s.plane)}, &rbacv1.RoleBinding{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// deleteAutoscalerKubeconfig deletes the autoscaler's kubeconfig Secret, if the
// operator made it for this plane.
func (r *ComputePlaneReconciler) deleteAutoscalerKubeconfig(ctx context.Context, s *scope) error {
	cred := r.autoscalerCredential(s.plane)
	secrets := r.secretsIn(ctx, cred.secret.Namespace, s)
	secret := &corev1.Secret{}
	switch err := secrets.get(cred.secret.Name, secret); {
	case apierrors.IsNotFound(err), errors.Is(err, errNamespaceTerminating):
		return nil
	case err != nil:
		return err
	case !cred.owned(secret):
		return nil
	}
	cred.mem.forget(client.ObjectKeyFromObject(s.plane))
	return secrets.delete(secret)
}

// deleteOwned deletes the plane's objects of kinds in its infrastructure namespace whose
// names keep does not hold.
func (r *ComputePlaneReconciler) deleteOwned(ctx context.Context, s *scope, kinds []schema.GroupVersionKind, keep sets.Set[string]) error {
	ns := s.plane.Status.InfrastructureNamespace
	if ns == "" {
		return nil
	}
	for _, gvk := range kinds {
		items, err := listOwned(ctx, r.Client, gvk, ns, s.planeSelector())
		if err != nil {
			return err
		}
		for _, o := range items {
			if keep.Has(o.GetName()) || !o.GetDeletionTimestamp().IsZero() {
				continue
			}
			if err := client.IgnoreNotFound(r.Delete(ctx, o)); err != nil {
				return err
			}
		}
	}
	return nil
}

// uncached reads around the manager's cache: what it writes has no informer.
type uncached struct {
	client.Client
	reader client.Reader
}

func (c uncached) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.reader.Get(ctx, key, obj, opts...)
}
