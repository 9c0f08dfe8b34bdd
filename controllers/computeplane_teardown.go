package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/remote"
)

// uninstallPlacement deletes the namespace's placement releases and waits until Flux has
// uninstalled each from the plane (the placement finalizer comes off only then), while
// the plane and the applier credential still work: the operator keeps the credential
// valid (and issues one if the gate had closed) for as long as releases are left, which
// is safe because admission takes no new release for a plane being deleted, and Flux
// only runs the delete path of a terminating release. A tenant namespace being deleted
// cannot hold a credential any more (nothing new may be created in it): then the
// releases go at once, and their objects with the plane.
func (r *ComputePlaneReconciler) uninstallPlacement(ctx context.Context, s *scope) (bool, string, error) {
	p := s.plane
	releases, err := r.placementReleases(ctx, p.Namespace)
	if err != nil || len(releases) == 0 {
		return err == nil, "", err
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, client.ObjectKey{Name: p.Namespace}, ns); client.IgnoreNotFound(err) != nil {
		return false, "", err
	}
	if !ns.DeletionTimestamp.IsZero() {
		names, err := r.releasePlacementFinalizers(ctx, releases)
		if err != nil {
			return false, "", err
		}
		if len(names) > 0 {
			r.Events.Eventf(p, nil, corev1.EventTypeNormal, "PlacementReleased", "Teardown",
				"Namespace %s is being deleted: placement releases %v go now, and their objects in the plane with the plane", p.Namespace, names)
		}
		return true, "", nil
	}
	var names []string
	for i := range releases {
		hr := &releases[i]
		names = append(names, hr.Name)
		if hr.DeletionTimestamp.IsZero() {
			if err := client.IgnoreNotFound(r.Delete(ctx, hr)); err != nil {
				return false, "", err
			}
		}
	}
	sort.Strings(names)
	msg := fmt.Sprintf("waiting for Flux to uninstall %d placement release(s) from the plane (%s)", len(names), strings.Join(names, ", "))
	if why, err := r.keepUninstallCredential(ctx, s); err != nil {
		return false, "", err
	} else if why != "" {
		msg += "; " + why
	}
	return false, msg, nil
}

// abandonPlacement lets the placement releases go without their uninstall.
func (r *ComputePlaneReconciler) abandonPlacement(ctx context.Context, s *scope) (string, error) {
	releases, err := r.placementReleases(ctx, s.plane.Namespace)
	if err != nil {
		return "", err
	}
	names, err := r.releasePlacementFinalizers(ctx, releases)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("placement releases %v without their uninstall (their objects stay in the plane until it is deleted with its Cluster)", names), nil
}

// placementReleases lists the namespace's placement releases from the API server, not the
// cache: a release created just before its plane was deleted, not yet in the cache, would
// be missed, the plane would go without it, and the release would keep its finalizer
// (and its namespace) forever, since nothing could uninstall it any more.
func (r *ComputePlaneReconciler) placementReleases(ctx context.Context, namespace string) ([]helmv2.HelmRelease, error) {
	var hrs helmv2.HelmReleaseList
	if err := r.APIReader.List(ctx, &hrs, client.InNamespace(namespace), client.MatchingLabels{cpv1.PlacementLabel: cpv1.PlacementLabelValue}); err != nil {
		return nil, err
	}
	return hrs.Items, nil
}

// releasePlacementFinalizers deletes the releases (if they are not yet) and removes the
// operator's placement finalizer from them. The list may have caught a release before
// the placement controller added its finalizer, so once the releases are deleting they
// are listed again: from then on no finalizer can be added, and what that list shows is
// all there is to remove.
func (r *ComputePlaneReconciler) releasePlacementFinalizers(ctx context.Context, releases []helmv2.HelmRelease) ([]string, error) {
	deleted := false
	for i := range releases {
		hr := &releases[i]
		if hr.DeletionTimestamp.IsZero() {
			if err := client.IgnoreNotFound(r.Delete(ctx, hr)); err != nil {
				return nil, err
			}
			deleted = true
		}
	}
	if deleted {
		var err error
		if releases, err = r.placementReleases(ctx, releases[0].Namespace); err != nil {
			return nil, err
		}
	}
	var names []string
	for i := range releases {
		hr := &releases[i]
		if hr.DeletionTimestamp.IsZero() {
			// Created since the first list.
			if err := client.IgnoreNotFound(r.Delete(ctx, hr)); err != nil {
				return names, err
			}
		}
		if !controllerutil.ContainsFinalizer(hr, cpv1.PlacementFinalizer) {
			continue
		}
		patch := client.MergeFromWithOptions(hr.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(hr, cpv1.PlacementFinalizer)
		if err := client.IgnoreNotFound(r.Patch(ctx, hr, patch, client.FieldOwner(FieldOwner))); err != nil {
			return names, err
		}
		names = append(names, hr.Name)
	}
	sort.Strings(names)
	return names, nil
}

// keepUninstallCredential makes sure the applier credential and the identities behind
// it work, so Flux can uninstall. It returns why it cannot ("" when it can).
func (r *ComputePlaneReconciler) keepUninstallCredential(ctx context.Context, s *scope) (string, error) {
	p := s.plane
	if p.Status.InfrastructureNamespace == "" {
		return "the plane was never provisioned, so Flux has nothing to uninstall from", nil
	}
	obs, err := r.observeProviders(ctx, s, p.Status.InfrastructureNamespace, true)
	if err != nil {
		return "", err
	}
	if obs.credential == nil || obs.kubeconfigUnusable != "" {
		return "the plane's admin kubeconfig is not usable, so the operator cannot keep Flux's credential valid", nil
	}
	s.admin = obs.credential
	plane, err := r.Planes.Get(ctx, client.ObjectKeyFromObject(p), s.admin)
	var unreachable *remote.UnreachableError
	if errors.As(err, &unreachable) {
		return fmt.Sprintf("the plane's API does not answer (%v), so Flux cannot uninstall until it does", unreachable), nil
	}
	if err != nil {
		return "", err
	}
	class := &cpv1.ComputePlaneClass{}
	if err := r.Get(ctx, client.ObjectKey{Name: p.Spec.ClassName}, class); client.IgnoreNotFound(err) != nil {
		return "", err
	}
	s.class = class
	for _, o := range remote.Identities([]string{p.Namespace}, placementNamespaces(p), class.Spec.PlacementNamespaces.AllowPodExec, render.PlaneLabels(p)) {
		if _, err := remote.Apply(ctx, plane.Client, o, HardeningFieldOwner, remote.ExactFields(o)...); err != nil {
			if apierrors.IsNotFound(err) {
				return "a placement namespace is gone from the plane, so Flux cannot uninstall what was in it", nil
			}
			return "", err
		}
	}
	if _, conflict, err := r.ensureApplierSecret(ctx, s, plane); err != nil || conflict != "" {
		return conflict, err
	}
	return "", nil
}

// removeIdentities revokes the applier credential, then removes from the plane
// everything the operator gave an identity or a place to: the deployers and their
// Roles, the applier, the placement namespaces and its own namespace. When the plane
// does not answer, the credential is still revoked on the management side, and the stage
// waits.
func (r *ComputePlaneReconciler) removeIdentities(ctx context.Context, s *scope) (bool, string, error) {
	p := s.plane
	if err := r.revokeApplierCredential(ctx, s); err != nil {
		return false, "", err
	}
	if p.Status.InfrastructureNamespace == "" {
		return true, "", nil
	}
	plane, ok := r.Planes.Existing(ctx, client.ObjectKeyFromObject(p))
	if !ok {
		if s.admin == nil {
			obs, err := r.observeProviders(ctx, s, p.Status.InfrastructureNamespace, true)
			if err != nil {
				return false, "", err
			}
			s.admin = obs.credential
		}
		if s.admin == nil {
			return true, "", nil // never reachable: nothing was ever put there
		}
		var err error
		if plane, err = r.Planes.Get(ctx, client.ObjectKeyFromObject(p), s.admin); err != nil {
			return false, fmt.Sprintf("the applier credential is revoked; the plane's API does not answer (%v), so its deployers, applier and placement namespaces cannot be removed yet", err), nil
		}
	}
	labels := render.PlaneSelector(p)
	objs := remote.Identities([]string{p.Namespace}, placementNamespaces(p), false, labels)
	posture := remote.Posture{PlacementNamespaces: placementNamespaces(p), Labels: labels}
	for _, o := range posture.PlacementObjects() {
		if _, isNamespace := o.(*corev1.Namespace); isNamespace {
			objs = append(objs, o)
		}
	}
	removed, err := remote.DeleteOwned(ctx, plane.Client, objs, labels)
	if err != nil {
		return false, "", err
	}
	if len(removed) > 0 {
		r.Events.Eventf(p, nil, corev1.EventTypeNormal, "IdentitiesRemoved", "Teardown", "Removed from the plane: %s", strings.Join(removed, ", "))
	}
	return true, "", nil
}

// deleteEgressPolicies removes the plane's egress baseline (and, later, its grants).
// The infrastructure namespace's default deny stays until the namespace goes: no VM is
// ever unselected, even while the Cluster is deleted.
func (r *ComputePlaneReconciler) deleteEgressPolicies(ctx context.Context, s *scope) (bool, string, error) {
	ns := s.plane.Status.InfrastructureNamespace
	if ns == "" {
		return true, "", nil
	}
	var policies ciliumv2.CiliumNetworkPolicyList
	if err := r.List(ctx, &policies, client.InNamespace(ns), s.planeSelector()); err != nil {
		return false, "", err
	}
	for i := range policies.Items {
		if err := client.IgnoreNotFound(r.Delete(ctx, &policies.Items[i])); err != nil {
			return false, "", err
		}
	}
	return true, "", nil
}
