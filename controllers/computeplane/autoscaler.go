package computeplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/remote/posture"
	"github.com/cozystack/computeplane/ssa"
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

// applyAutoscaler writes the autoscaler's objects (server-side apply, skipped when they
// read as wanted) with the operator's rights in the infrastructure namespace, and says
// which it restored.
func (r *Reconciler) applyAutoscaler(ctx context.Context, objs []client.Object) ([]string, error) {
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
func (r *Reconciler) deleteAutoscaler(ctx context.Context, s *scope) (stageWait, error) {
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
func (r *Reconciler) autoscalerMayExist(ctx context.Context, s *scope) (bool, error) {
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
func (r *Reconciler) deleteAutoscalerKubeconfig(ctx context.Context, s *scope) error {
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

// uncached reads around the manager's cache: what it writes has no informer.
type uncached struct {
	client.Client
	reader client.Reader
}

func (c uncached) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.reader.Get(ctx, key, obj, opts...)
}

// autoscalerIssued is what reconcileAutoscalerCredential found or wrote.
type autoscalerIssued struct {
	// conflict: a Secret of the credential's name is not this plane's.
	conflict string
	// expires is when the autoscaler's token expires (zero: no autoscaler).
	expires time.Time
	// message completes the Identities condition's.
	message string
	// pending: the autoscaler is still going; look again soon.
	pending bool
}

// reconcileAutoscaler keeps the cluster-autoscaler while a node group autoscales: its
// kubeconfig (its identity in the plane was applied and read back with the others), then
// its Deployment, ServiceAccount and RoleBinding in the infrastructure namespace; and
// takes the identity, the kubeconfig and the rest away when no group autoscales. It runs
// on a full read of a verified plane only, so a plane at rest costs no read of them: a
// changed Deployment is put back on the next full read (a watch of Deployments would
// need them cluster-wide). A changed kubeconfig Secret is rewritten with a new token at
// once: it is the operator's, in a namespace no tenant writes, and the gate does not
// depend on it.
func (r *Reconciler) reconcileAutoscaler(ctx context.Context, s *scope, plane *remote.Plane) (autoscalerIssued, error) {
	p := s.plane
	graph := render.Autoscaler(p, s.class)
	if len(graph) == 0 {
		removed, err := remote.RevokeAutoscaler(ctx, plane.Client, render.PlaneSelector(p))
		if len(removed) > 0 {
			r.Events.Eventf(p, nil, corev1.EventTypeNormal, "AutoscalerRevoked", "Revoke",
				"No node group autoscales: removed %s", strings.Join(removed, ", "))
		}
		if err != nil {
			return autoscalerIssued{}, err
		}
		w, err := r.deleteAutoscaler(ctx, s)
		return autoscalerIssued{pending: !w.done}, err
	}
	cred := r.autoscalerCredential(p)
	found, err := r.inspectCredential(ctx, s, plane, cred)
	if err != nil || found.conflict != "" {
		return autoscalerIssued{conflict: found.conflict}, err
	}
	if found.changed != "" {
		r.Events.Eventf(p, nil, corev1.EventTypeWarning, cpv1.DriftedReason, "Drift",
			"Secret %s changed (%s); a new token replaces it", cred.secret, found.changed)
	}
	expires := found.expires
	if found.rewrite() {
		if expires, err = r.writeCredential(ctx, s, plane, cred, found); err != nil {
			return autoscalerIssued{}, err
		}
	}
	restored, err := r.applyAutoscaler(ctx, graph)
	if len(restored) > 0 {
		driftRepairs.WithLabelValues(cpv1.IdentitiesCondition).Add(float64(len(restored)))
		r.Events.Eventf(p, nil, corev1.EventTypeWarning, cpv1.DriftedReason, "Drift",
			"Restored what someone changed in %s", strings.Join(restored, ", "))
	}
	if err != nil {
		return autoscalerIssued{}, err
	}
	return autoscalerIssued{expires: expires, message: fmt.Sprintf(
		"; cluster-autoscaler %s/%s has its own rights in the plane, its kubeconfig Secret %s expires at %s",
		posture.AutoscalerNamespace, posture.AutoscalerName, cred.secret, expires.UTC().Format(time.RFC3339))}, nil
}
