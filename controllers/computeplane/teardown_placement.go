package computeplane

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/controllers/tenancy"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/remote/posture"
)

// protectedByReleases holds a deleted plane whole while placement releases that no one
// deleted still run in it, unless its owner asked for them to be uninstalled (the
// uninstall-releases annotation): the capabilities design's deletion protection, for a
// delete that got past admission (its webhook down, or a cluster admin). Nothing is
// uninstalled meanwhile, and the applier credential is revoked: no hardening stage runs
// during deletion, so nothing may keep applying into the plane. Once every release is
// deleted (by its owner), the next stage uninstalls them with a credential it issues
// over a verified plane. A tenant namespace being deleted protects nothing: its releases
// go with it.
func (r *Reconciler) protectedByReleases(ctx context.Context, s *scope) (stageWait, error) {
	p := s.plane
	if p.Annotations[cpv1.UninstallAnnotation] != "" {
		return stageWait{done: true}, nil
	}
	running, err := runningReleases(ctx, r.APIReader, p.Namespace)
	if err != nil {
		return stageWait{}, err
	}
	if len(running) == 0 {
		return stageWait{done: true}, nil
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, client.ObjectKey{Name: p.Namespace}, ns); client.IgnoreNotFound(err) != nil {
		return stageWait{}, err
	}
	if !ns.DeletionTimestamp.IsZero() {
		return stageWait{done: true}, nil
	}
	if err := r.revokeApplierCredential(ctx, s); err != nil {
		return stageWait{}, err
	}
	return stageWait{message: fmt.Sprintf("%s; nothing is uninstalled and placement is closed until they are deleted, or until the plane's owner annotates %s=<why> to have them uninstalled with it",
		protectedBy(running), cpv1.UninstallAnnotation)}, nil
}

// runningReleases are the names, sorted, of the namespace's placement releases not being
// deleted, read from the API server (not the cache: one created a moment ago protects
// too), as metadata: names and deletion are all it needs of them.
func runningReleases(ctx context.Context, reader client.Reader, namespace string) ([]string, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(helmv2.GroupVersion.WithKind(helmv2.HelmReleaseKind + "List"))
	if err := reader.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{cpv1.PlacementLabel: cpv1.PlacementLabelValue}); err != nil {
		return nil, err
	}
	var out []string
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			out = append(out, list.Items[i].Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// protectedBy says which placement releases protect a plane, naming at most ten.
func protectedBy(names []string) string {
	shown := names
	if len(shown) > 10 {
		shown = shown[:10]
	}
	more := ""
	if n := len(names) - len(shown); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return fmt.Sprintf("%d placement release(s) still run in the plane (%s%s)", len(names), strings.Join(shown, ", "), more)
}

// DefaultUninstallTimeout is a class's placementReleases.uninstallTimeout when it has
// none stored.
const DefaultUninstallTimeout = 30 * time.Minute

// uninstallPlacement deletes the namespace's placement releases and waits until Flux has
// uninstalled each from the plane (the placement finalizer comes off only then), while
// the plane and the applier credential still work: the operator keeps the credential
// valid (and issues one if the gate had closed) while releases hold it, which is safe
// because admission takes no new release for a plane being deleted, Flux only runs the
// delete path of a terminating release, and the credential is issued only while the
// plane's hardening reads back as applied and in force. The wait is bounded by the
// class's uninstallTimeout: past it the credential is revoked and the stage is Stalled
// until a platform operator abandons it. A tenant namespace being deleted cannot hold a
// credential any more (nothing new may be created in it): then the releases go at once,
// and their objects with the plane.
func (r *Reconciler) uninstallPlacement(ctx context.Context, s *scope) (stageWait, error) {
	p := s.plane
	releases, err := r.placementReleases(ctx, p.Namespace)
	if err != nil || len(releases) == 0 {
		return stageWait{done: err == nil}, err
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, client.ObjectKey{Name: p.Namespace}, ns); client.IgnoreNotFound(err) != nil {
		return stageWait{}, err
	}
	if !ns.DeletionTimestamp.IsZero() {
		names, err := r.releasePlacementFinalizers(ctx, releases)
		if err != nil {
			return stageWait{}, err
		}
		if len(names) > 0 {
			r.Events.Eventf(p, nil, corev1.EventTypeNormal, "PlacementReleased", "Teardown",
				"Namespace %s is being deleted: placement releases %v go now, and their objects in the plane with the plane", p.Namespace, names)
		}
		return stageWait{done: true}, nil
	}
	for i := range releases {
		hr := &releases[i]
		if hr.DeletionTimestamp.IsZero() {
			if err := client.IgnoreNotFound(r.Delete(ctx, hr)); err != nil {
				return stageWait{}, err
			}
		}
	}
	held := uninstallHolds(releases)
	if len(held) == 0 {
		// What is left is kept only by finalizers that are neither Flux's nor the
		// operator's: Flux is done with them, and nothing there needs a credential.
		return stageWait{done: true}, nil
	}
	class := &cpv1.ComputePlaneClass{}
	if err := r.Get(ctx, client.ObjectKey{Name: p.Spec.ClassName}, class); client.IgnoreNotFound(err) != nil {
		return stageWait{}, err
	}
	timeout := uninstallTimeout(class)
	if since := stageSince(p, cpv1.UninstallingPlacementReason); time.Since(since) > timeout {
		if err := r.revokeApplierCredential(ctx, s); err != nil {
			return stageWait{}, err
		}
		msg := fmt.Sprintf("Flux has not uninstalled %d placement release(s) within the class's placementReleases.uninstallTimeout (%s): %s; the uninstall credential is revoked",
			len(held), timeout, strings.Join(held, "; "))
		if c := apimeta.FindStatusCondition(p.Status.Conditions, cpv1.StalledCondition); c == nil || c.Reason != cpv1.UninstallTimedOutReason {
			r.Events.Eventf(p, nil, corev1.EventTypeWarning, cpv1.UninstallTimedOutReason, "Teardown", "%s", msg)
		}
		return stageWait{message: msg, stalled: cpv1.UninstallTimedOutReason}, nil
	}
	msg := fmt.Sprintf("waiting for Flux to uninstall %d placement release(s) from the plane (%s)", len(held), strings.Join(held, "; "))
	why, err := r.keepUninstallCredential(ctx, s, class)
	if err != nil {
		return stageWait{}, err // reconcileDelete revokes the credential
	}
	if why != "" {
		// A plane the operator could not reach or verify this pass holds no credential.
		if err := r.revokeApplierCredential(ctx, s); err != nil {
			return stageWait{}, err
		}
		msg += "; " + why
	}
	return stageWait{message: msg}, nil
}

// uninstallHolds describes, sorted, each release that still needs the uninstall
// credential: one installed in the plane (status.storageNamespace, which Flux clears once
// it uninstalled and sets only when it installed) that Flux (its finalizer) or the
// operator (the placement finalizer) still holds. The credential is the tenant's too (its
// Secret is in the tenant's namespace, for Flux), so it is kept exactly as long as Flux
// has something to uninstall: a release never installed, or already uninstalled, needs
// none, whatever finalizers it carries. It names what else keeps each one, so a person
// knows whom to ask. It is pure.
func uninstallHolds(releases []helmv2.HelmRelease) []string {
	var out []string
	for i := range releases {
		hr := &releases[i]
		if hr.Status.StorageNamespace == "" {
			continue
		}
		if !controllerutil.ContainsFinalizer(hr, cpv1.PlacementFinalizer) && !controllerutil.ContainsFinalizer(hr, helmv2.HelmReleaseFinalizer) {
			continue
		}
		var why []string
		if key, ok := hr.Labels[cpv1.ShardKeyLabel]; ok {
			why = append(why, fmt.Sprintf("labelled %s=%s: only a Flux shard serving that key uninstalls it", cpv1.ShardKeyLabel, key))
		}
		var foreign []string
		for _, f := range hr.Finalizers {
			if f != cpv1.PlacementFinalizer && f != helmv2.HelmReleaseFinalizer {
				foreign = append(foreign, f)
			}
		}
		if len(foreign) > 0 {
			why = append(why, fmt.Sprintf("also held by finalizer(s) %s", strings.Join(foreign, ", ")))
		}
		if c := apimeta.FindStatusCondition(hr.Status.Conditions, meta.ReadyCondition); c != nil && c.Status == metav1.ConditionFalse && c.Message != "" {
			why = append(why, fmt.Sprintf("Flux says: %s", truncate(c.Message, 200)))
		}
		if len(why) == 0 {
			out = append(out, hr.Name)
			continue
		}
		out = append(out, fmt.Sprintf("%s (%s)", hr.Name, strings.Join(why, "; ")))
	}
	sort.Strings(out)
	return out
}

// uninstallTimeout is the class's bound on waiting for Flux to uninstall.
func uninstallTimeout(class *cpv1.ComputePlaneClass) time.Duration {
	if t := class.Spec.PlacementReleases.UninstallTimeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return DefaultUninstallTimeout
}

// stageSince is when the teardown began waiting on the stage, as the status records it
// (now when it does not yet).
func stageSince(p *cpv1.ComputePlane, stage string) time.Time {
	if d := p.Status.Deletion; d != nil && d.Stage == stage {
		return d.Since.Time
	}
	return time.Now()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// abandonPlacement lets the placement releases go without their uninstall.
func (r *Reconciler) abandonPlacement(ctx context.Context, s *scope) (string, error) {
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
func (r *Reconciler) placementReleases(ctx context.Context, namespace string) ([]helmv2.HelmRelease, error) {
	return listReleases(ctx, r.APIReader, namespace, client.MatchingLabels{cpv1.PlacementLabel: cpv1.PlacementLabelValue})
}

// releasePlacementFinalizers deletes the releases (if they are not yet) and removes the
// operator's placement finalizer from them. The list may have caught a release before
// the placement controller added its finalizer, so once the releases are deleting they
// are listed again: from then on no finalizer can be added, and what that list shows is
// all there is to remove.
func (r *Reconciler) releasePlacementFinalizers(ctx context.Context, releases []helmv2.HelmRelease) ([]string, error) {
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
// it work, so Flux can uninstall, but only while the plane's hardening is as the
// operator applied it and in force: the teardown runs no hardening stage, so it looks
// itself, and a plane found changed gets no credential until the operator has restored
// it and read it back. It returns why it cannot ("" when it can); the caller then revokes
// the credential.
func (r *Reconciler) keepUninstallCredential(ctx context.Context, s *scope, class *cpv1.ComputePlaneClass) (string, error) {
	p := s.plane
	if p.Status.InfrastructureNamespace == "" {
		return "the plane was never provisioned, so Flux has nothing to uninstall from", nil
	}
	if class.Name == "" {
		return fmt.Sprintf("ComputePlaneClass %q is gone, so the plane's hardening cannot be verified and no uninstall credential is issued", p.Spec.ClassName), nil
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
	s.class = class
	if why, err := r.hardeningHolds(ctx, s, plane); err != nil || why != "" {
		return why, err
	}
	ids := posture.Identities([]string{p.Namespace}, tenancy.PlacementNamespaces(p), class.Spec.PlacementNamespaces.AllowPodExec, render.PlaneLabels(p))
	if err := remote.ApplyIdentities(ctx, plane.Client, ids); err != nil {
		if apierrors.IsNotFound(err) {
			return "a placement namespace is gone from the plane, so Flux cannot uninstall what was in it", nil
		}
		return "", err
	}
	if _, conflict, err := r.ensureApplierSecret(ctx, s, plane); err != nil || conflict != "" {
		return conflict, err
	}
	return "", nil
}

// hardeningHolds re-verifies the plane's hardening during teardown: read back as
// applied, and each policy refusing what it must. What it finds changed it restores
// (labelling new namespaces is no change), to be verified on a later pass. It returns
// why the hardening does not hold ("" when it does).
func (r *Reconciler) hardeningHolds(ctx context.Context, s *scope, plane *remote.Plane) (string, error) {
	want := postureFor(s.plane, s.class, plane.Identity)
	found, err := remote.Inspect(ctx, plane.Client, want)
	if err != nil {
		return "", err
	}
	if conflict := foreignPlacementNamespaces(found); conflict != "" {
		return conflict, nil
	}
	if found.Drifted() || len(found.New) > 0 {
		if _, _, err := remote.Harden(ctx, plane.Client, want, remote.FieldOwner); err != nil {
			return "", err
		}
	}
	if found.Drifted() {
		why := fmt.Sprintf("the plane's hardening is not as the operator left it (%s): the uninstall credential is revoked until it is restored, read back and in force",
			strings.Join(append(found.Admission, found.PodSecurity...), ", "))
		r.Events.Eventf(s.plane, nil, corev1.EventTypeWarning, cpv1.DriftedReason, "Teardown", "%s", why)
		return why, nil
	}
	canary, err := plane.Canary()
	if err != nil {
		return "", err
	}
	pending, err := remote.Unenforced(ctx, canary, want)
	if err != nil {
		return "", err
	}
	if len(pending) > 0 {
		return fmt.Sprintf("the plane's API server does not enforce %v (a dry-run request they must refuse was accepted): no uninstall credential until it does", pending), nil
	}
	return "", nil
}
