package capistandin

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// clusters plays Cluster API core's Cluster reconciler (core/reconcilers/cluster of
// v1.14.2) for a Cluster without topology whose references are a KamajiControlPlane
// (contract v1beta2) and a KubevirtCluster (CAPK v0.1.10, contract v1beta1).
type clusters struct {
	client client.Client
	mapper apimeta.RESTMapper
}

func (r *clusters) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &clusterv1.Cluster{}
	if err := r.client.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, cluster)
	}
	if controllerutil.AddFinalizer(cluster, clusterv1.ClusterFinalizer) {
		if err := r.client.Update(ctx, cluster); err != nil {
			return ctrl.Result{}, err
		}
	}
	if paused(cluster, cluster) {
		return ctrl.Result{}, nil
	}
	before := cluster.DeepCopy()
	infra, err := r.reconcileExternal(ctx, cluster, cluster.Spec.InfrastructureRef)
	if err != nil {
		return ctrl.Result{}, err
	}
	cp, err := r.reconcileExternal(ctx, cluster, cluster.Spec.ControlPlaneRef)
	if err != nil {
		return ctrl.Result{}, err
	}
	reconcileInfrastructure(cluster, infra)
	reconcileControlPlane(cluster, cp)
	setConditions(cluster, infra, cp)
	cluster.Status.Phase = string(phase(cluster))

	if cluster.Spec.ControlPlaneEndpoint != before.Spec.ControlPlaneEndpoint {
		patch := client.MergeFrom(before.DeepCopy())
		status := cluster.Status
		if err := r.client.Patch(ctx, cluster, patch); err != nil {
			return ctrl.Result{}, err
		}
		cluster.Status = status
	}
	patch := client.MergeFrom(before)
	if err := r.client.Status().Patch(ctx, cluster, patch); err != nil {
		return ctrl.Result{}, err
	}
	if infra == nil || cp == nil {
		return ctrl.Result{RequeueAfter: externalReadyWait}, nil
	}
	return ctrl.Result{}, nil
}

// externalReadyWait is the core controller's wait for a referenced object that does not
// exist yet.
const externalReadyWait = 30 * time.Second

// reconcileExternal follows cluster_controller_phases.go reconcileExternal and
// ensureOwnerRefAndLabel: the referenced object gets an owner reference to the Cluster
// (not a controller reference: the Cluster has no topology) and the cluster-name label.
// It returns nil when the object does not exist yet.
func (r *clusters) reconcileExternal(ctx context.Context, cluster *clusterv1.Cluster, ref clusterv1.ContractVersionedObjectReference) (*unstructured.Unstructured, error) {
	if !ref.IsDefined() {
		return nil, nil
	}
	mapping, err := r.mapper.RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: ref.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	owned := false
	for _, o := range obj.GetOwnerReferences() {
		owned = owned || (o.UID == cluster.UID && o.Kind == "Cluster")
	}
	if owned && obj.GetLabels()[clusterv1.ClusterNameLabel] == cluster.Name {
		return obj, nil
	}
	patch := client.MergeFrom(obj.DeepCopy())
	if err := controllerutil.SetOwnerReference(cluster, obj, r.client.Scheme()); err != nil {
		return nil, err
	}
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[clusterv1.ClusterNameLabel] = cluster.Name
	obj.SetLabels(labels)
	return obj, r.client.Patch(ctx, obj, patch)
}

// reconcileInfrastructure: a v1beta1-contract infrastructure cluster is provisioned when
// status.ready is true (v1beta2: status.initialization.provisioned); once it is, its
// spec.controlPlaneEndpoint becomes the Cluster's, unless the Cluster has one.
func reconcileInfrastructure(cluster *clusterv1.Cluster, infra *unstructured.Unstructured) {
	if infra == nil || !infra.GetDeletionTimestamp().IsZero() {
		return
	}
	ready, _, _ := unstructured.NestedBool(infra.Object, "status", "ready")
	provisioned, _, _ := unstructured.NestedBool(infra.Object, "status", "initialization", "provisioned")
	if !ready && !provisioned && !deref(cluster.Status.Initialization.InfrastructureProvisioned) {
		return
	}
	if !cluster.Spec.ControlPlaneEndpoint.IsValid() {
		cluster.Spec.ControlPlaneEndpoint = endpointOf(infra)
	}
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
}

// reconcileControlPlane: a v1beta2-contract control plane is initialised when
// status.initialization.controlPlaneInitialized is true; its spec.controlPlaneEndpoint
// becomes the Cluster's when the Cluster has none.
func reconcileControlPlane(cluster *clusterv1.Cluster, cp *unstructured.Unstructured) {
	if cp == nil || !cp.GetDeletionTimestamp().IsZero() {
		return
	}
	initialized, _, _ := unstructured.NestedBool(cp.Object, "status", "initialization", "controlPlaneInitialized")
	if !initialized && !deref(cluster.Status.Initialization.ControlPlaneInitialized) {
		return
	}
	if !cluster.Spec.ControlPlaneEndpoint.IsValid() {
		cluster.Spec.ControlPlaneEndpoint = endpointOf(cp)
	}
	cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
}

// phase follows cluster_controller_status.go setPhase.
func phase(cluster *clusterv1.Cluster) clusterv1.ClusterPhase {
	switch {
	case !cluster.DeletionTimestamp.IsZero():
		return clusterv1.ClusterPhaseDeleting
	case deref(cluster.Status.Initialization.InfrastructureProvisioned) && cluster.Spec.ControlPlaneEndpoint.IsValid():
		return clusterv1.ClusterPhaseProvisioned
	case cluster.Spec.InfrastructureRef.IsDefined() || cluster.Spec.ControlPlaneRef.IsDefined():
		return clusterv1.ClusterPhaseProvisioning
	default:
		return clusterv1.ClusterPhasePending
	}
}

func endpointOf(o *unstructured.Unstructured) clusterv1.APIEndpoint {
	host, _, _ := unstructured.NestedString(o.Object, "spec", "controlPlaneEndpoint", "host")
	port, _, _ := unstructured.NestedInt64(o.Object, "spec", "controlPlaneEndpoint", "port")
	return clusterv1.APIEndpoint{Host: host, Port: int32(port)}
}

// setConditions follows cluster_controller_status.go setInfrastructureReadyCondition,
// setControlPlaneInitializedCondition and setControlPlaneAvailableCondition: the
// infrastructure's readiness (a v1beta1 object has no condition to mirror: the fallback
// from status.ready), the control plane's initialisation (once true, it stays), and the
// control plane's Available condition mirrored.
func setConditions(cluster *clusterv1.Cluster, infra, cp *unstructured.Unstructured) {
	set := func(t string, ok bool, yes, no, msg string) {
		c := metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: no, Message: msg, ObservedGeneration: cluster.Generation}
		if ok {
			c.Status, c.Reason, c.Message = metav1.ConditionTrue, yes, ""
		}
		apimeta.SetStatusCondition(&cluster.Status.Conditions, c)
	}
	switch {
	case infra == nil:
		set(clusterv1.ClusterInfrastructureReadyCondition, false, "", clusterv1.ClusterInfrastructureDoesNotExistReason,
			fmt.Sprintf("%s does not exist", cluster.Spec.InfrastructureRef.Kind))
	default:
		set(clusterv1.ClusterInfrastructureReadyCondition, deref(cluster.Status.Initialization.InfrastructureProvisioned),
			clusterv1.ClusterInfrastructureReadyReason, clusterv1.ClusterInfrastructureNotReadyReason,
			fmt.Sprintf("%s status.ready is false", cluster.Spec.InfrastructureRef.Kind))
	}
	initialized := deref(cluster.Status.Initialization.ControlPlaneInitialized)
	if !apimeta.IsStatusConditionTrue(cluster.Status.Conditions, clusterv1.ClusterControlPlaneInitializedCondition) {
		reason := clusterv1.ClusterControlPlaneNotInitializedReason
		if cp == nil {
			reason = clusterv1.ClusterControlPlaneDoesNotExistReason
		}
		set(clusterv1.ClusterControlPlaneInitializedCondition, initialized, clusterv1.ClusterControlPlaneInitializedReason, reason,
			"Control plane not yet initialized")
	}
	available := metav1.Condition{Type: clusterv1.ClusterControlPlaneAvailableCondition, ObservedGeneration: cluster.Generation}
	var mirrored *metav1.Condition
	if cp != nil {
		conds, _, _ := unstructured.NestedSlice(cp.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				s, _ := m["status"].(string)
				reason, _ := m["reason"].(string)
				msg, _ := m["message"].(string)
				mirrored = &metav1.Condition{Status: metav1.ConditionStatus(s), Reason: reason, Message: msg}
			}
		}
	}
	switch {
	case mirrored != nil:
		available.Status, available.Reason, available.Message = mirrored.Status, mirrored.Reason, mirrored.Message
	case initialized:
		available.Status, available.Reason = metav1.ConditionTrue, clusterv1.ClusterControlPlaneAvailableReason
	default:
		available.Status, available.Reason = metav1.ConditionFalse, clusterv1.ClusterControlPlaneNotAvailableReason
	}
	apimeta.SetStatusCondition(&cluster.Status.Conditions, available)
}

// reconcileDelete follows cluster_controller.go reconcileDelete for a Cluster without
// topology: delete the MachineDeployments, then the control plane, then the
// infrastructure cluster, wait for each kind to be gone, then remove the finalizer.
func (r *clusters) reconcileDelete(ctx context.Context, cluster *clusterv1.Cluster) (ctrl.Result, error) {
	var mds clusterv1.MachineDeploymentList
	if err := r.client.List(ctx, &mds, client.InNamespace(cluster.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}); err != nil {
		return ctrl.Result{}, err
	}
	for i := range mds.Items {
		if err := deleteOnce(ctx, r.client, &mds.Items[i]); err != nil {
			return ctrl.Result{}, err
		}
	}
	if len(mds.Items) > 0 {
		return requeue, nil
	}
	for _, ref := range []clusterv1.ContractVersionedObjectReference{cluster.Spec.ControlPlaneRef, cluster.Spec.InfrastructureRef} {
		if !ref.IsDefined() {
			continue
		}
		mapping, err := r.mapper.RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
		if err != nil {
			return ctrl.Result{}, err
		}
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(mapping.GroupVersionKind)
		err = r.client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: ref.Name}, obj)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := deleteOnce(ctx, r.client, obj); err != nil {
			return ctrl.Result{}, err
		}
		return requeue, nil
	}
	if controllerutil.RemoveFinalizer(cluster, clusterv1.ClusterFinalizer) {
		return ctrl.Result{}, client.IgnoreNotFound(r.client.Update(ctx, cluster))
	}
	return ctrl.Result{}, nil
}

func deleteOnce(ctx context.Context, c client.Client, o client.Object) error {
	if !o.GetDeletionTimestamp().IsZero() {
		return nil
	}
	return client.IgnoreNotFound(c.Delete(ctx, o))
}

// ownedToCluster requeues the Cluster a referenced object belongs to.
func ownedToCluster(_ context.Context, o client.Object) []reconcile.Request {
	if name := o.GetLabels()[clusterv1.ClusterNameLabel]; name != "" {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
	}
	for _, ref := range o.GetOwnerReferences() {
		if ref.Kind == "Cluster" {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}}
		}
	}
	return nil
}
