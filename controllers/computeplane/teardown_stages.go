package computeplane

import (
	"context"
	"fmt"
	"strings"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/controllers/tenancy"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/remote/posture"
)

// deleteAddons removes the cluster-autoscaler (before the Cluster: nothing scales what
// Cluster API deletes), then suspends and deletes the add-on releases: the plane is about
// to go, so nothing needs uninstalling, and a suspended release is deleted without
// contacting a plane API that may already be dead.
func (r *Reconciler) deleteAddons(ctx context.Context, s *scope) (stageWait, error) {
	ns := s.plane.Status.InfrastructureNamespace
	if ns == "" {
		return stageWait{done: true}, nil
	}
	if w, err := r.deleteAutoscaler(ctx, s); err != nil || !w.done {
		return w, err
	}
	hrs, err := r.addonReleases(ctx, ns, s.planeSelector())
	if err != nil {
		return stageWait{}, err
	}
	for i := range hrs {
		hr := &hrs[i]
		if !hr.Spec.Suspend {
			patch := client.MergeFrom(hr.DeepCopy())
			hr.Spec.Suspend = true
			if err := client.IgnoreNotFound(r.Patch(ctx, hr, patch)); err != nil {
				return stageWait{}, err
			}
		}
		if hr.DeletionTimestamp.IsZero() {
			if err := client.IgnoreNotFound(r.Delete(ctx, hr)); err != nil {
				return stageWait{}, err
			}
		}
	}
	if n := len(hrs); n > 0 {
		return stageWait{message: fmt.Sprintf("waiting for %d HelmRelease(s) in %s to go", n, ns)}, nil
	}
	return stageWait{done: true}, nil
}

// deleteCluster deletes the CAPI Cluster and waits for Cluster API to finish (it deletes
// the machines, the control plane and the infrastructure it owns).
func (r *Reconciler) deleteCluster(ctx context.Context, s *scope) (stageWait, error) {
	ns := s.plane.Status.InfrastructureNamespace
	if ns == "" {
		return stageWait{done: true}, nil
	}
	cluster := &clusterv1.Cluster{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.ClusterName(s.plane)}, cluster)
	if apierrors.IsNotFound(err) {
		return stageWait{done: true}, nil
	}
	if err != nil {
		return stageWait{}, err
	}
	if cluster.DeletionTimestamp.IsZero() {
		if err := client.IgnoreNotFound(r.Delete(ctx, cluster)); err != nil {
			return stageWait{}, err
		}
	}
	return stageWait{message: fmt.Sprintf("waiting for Cluster API to delete Cluster %s/%s", ns, cluster.Name)}, nil
}

// LeftoverKinds are the kinds (as lists) of what the operator applies in a plane's
// infrastructure namespace that Cluster API does not delete with the Cluster.
var LeftoverKinds = []schema.GroupVersionKind{
	clusterv1.GroupVersion.WithKind("MachineDeploymentList"),
	{Group: render.ControlPlaneGroup, Version: "v1alpha2", Kind: render.KamajiControlPlaneKind + "List"},
	{Group: render.InfrastructureGroup, Version: "v1alpha1", Kind: render.KubevirtClusterKind + "List"},
	{Group: render.InfrastructureGroup, Version: "v1alpha1", Kind: render.KubevirtTemplateKind + "List"},
	bootstrapv1.GroupVersion.WithKind("KubeadmConfigTemplateList"),
	// Cluster API's health check controller makes the Cluster own them (garbage
	// collected after it), but the operator does not count on a garbage collector.
	clusterv1.GroupVersion.WithKind("MachineHealthCheckList"),
	// The egress baseline goes only now, once the VMs it confines are gone.
	{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicyList"},
}

// deleteLeftovers removes what the operator applied and Cluster API did not delete (it
// deletes only what it owns; templates are never owned).
func (r *Reconciler) deleteLeftovers(ctx context.Context, s *scope) (stageWait, error) {
	ns := s.plane.Status.InfrastructureNamespace
	if ns == "" {
		return stageWait{done: true}, nil
	}
	remaining := 0
	for _, gvk := range LeftoverKinds {
		items, err := ListOwned(ctx, r.Client, gvk, ns, s.planeSelector())
		if err != nil {
			return stageWait{}, err
		}
		for _, o := range items {
			remaining++
			if o.GetDeletionTimestamp().IsZero() {
				if err := client.IgnoreNotFound(r.Delete(ctx, o)); err != nil {
					return stageWait{}, err
				}
			}
		}
	}
	if remaining > 0 {
		return stageWait{message: fmt.Sprintf("waiting for %d object(s) in %s to go", remaining, ns)}, nil
	}
	return stageWait{done: true}, nil
}

// deleteInfraNamespace deletes the dedicated namespace (never the tenant's own). Its
// contents are already gone; the namespace controller finishes it.
func (r *Reconciler) deleteInfraNamespace(ctx context.Context, s *scope) (stageWait, error) {
	ns := s.plane.Status.InfrastructureNamespace
	if ns == "" || ns == s.plane.Namespace {
		return stageWait{done: true}, nil
	}
	obj := &corev1.Namespace{}
	if err := r.Get(ctx, client.ObjectKey{Name: ns}, obj); err != nil {
		return stageWait{done: apierrors.IsNotFound(err)}, client.IgnoreNotFound(err)
	}
	if obj.Labels[cpv1.PlaneUIDLabel] != string(s.plane.UID) {
		return stageWait{done: true}, nil // not created for this plane: never deleted
	}
	if obj.DeletionTimestamp.IsZero() {
		return stageWait{done: true}, client.IgnoreNotFound(r.Delete(ctx, obj))
	}
	return stageWait{done: true}, nil
}

// removeIdentities revokes the applier credential, then removes from the plane
// everything the operator gave an identity or a place to: the deployers and their
// Roles, the applier, the placement namespaces and its own namespace. When the plane
// does not answer, the credential is still revoked on the management side, and the stage
// waits.
func (r *Reconciler) removeIdentities(ctx context.Context, s *scope) (stageWait, error) {
	p := s.plane
	if err := r.revokeApplierCredential(ctx, s); err != nil {
		return stageWait{}, err
	}
	if p.Status.InfrastructureNamespace == "" {
		return stageWait{done: true}, nil
	}
	plane, ok := r.Planes.Existing(ctx, client.ObjectKeyFromObject(p))
	if !ok {
		if s.admin == nil {
			obs, err := r.observeProviders(ctx, s, p.Status.InfrastructureNamespace, true)
			if err != nil {
				return stageWait{}, err
			}
			s.admin = obs.credential
		}
		if s.admin == nil {
			return stageWait{done: true}, nil // never reachable: nothing was ever put there
		}
		var err error
		if plane, err = r.Planes.Get(ctx, client.ObjectKeyFromObject(p), s.admin); err != nil {
			return stageWait{message: fmt.Sprintf("the applier credential is revoked; the plane's API does not answer (%v), so its deployers, applier and placement namespaces cannot be removed yet", err)}, nil
		}
	}
	labels := render.PlaneSelector(p)
	objs := posture.Identities([]string{p.Namespace}, tenancy.PlacementNamespaces(p), false, labels)
	placed := posture.Posture{PlacementNamespaces: tenancy.PlacementNamespaces(p), Labels: labels}
	for _, o := range placed.PlacementObjects() {
		if _, isNamespace := o.(*corev1.Namespace); isNamespace {
			objs = append(objs, o)
		}
	}
	removed, err := remote.DeleteOwned(ctx, plane.Client, objs, labels)
	if err != nil {
		return stageWait{}, err
	}
	// The cluster-autoscaler's identity too: its tokens die with it, before its
	// Deployment goes with the add-ons.
	autoscaler, err := remote.RevokeAutoscaler(ctx, plane.Client, labels)
	removed = append(removed, autoscaler...)
	if err != nil {
		return stageWait{}, err
	}
	if len(removed) > 0 {
		r.Events.Eventf(p, nil, corev1.EventTypeNormal, "IdentitiesRemoved", "Teardown", "Removed from the plane: %s", strings.Join(removed, ", "))
	}
	return stageWait{done: true}, nil
}

// deleteEgressPolicies removes the plane's egress baseline (and, later, its grants).
// The infrastructure namespace's default deny stays until the namespace goes: no VM is
// ever unselected, even while the Cluster is deleted.
func (r *Reconciler) deleteEgressPolicies(ctx context.Context, s *scope) (stageWait, error) {
	ns := s.plane.Status.InfrastructureNamespace
	if ns == "" {
		return stageWait{done: true}, nil
	}
	var policies ciliumv2.CiliumNetworkPolicyList
	if err := r.List(ctx, &policies, client.InNamespace(ns), s.planeSelector()); err != nil {
		return stageWait{}, err
	}
	for i := range policies.Items {
		if err := client.IgnoreNotFound(r.Delete(ctx, &policies.Items[i])); err != nil {
			return stageWait{}, err
		}
	}
	return stageWait{done: true}, nil
}
