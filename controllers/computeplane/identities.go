package computeplane

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/controllers/tenancy"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/remote/posture"
)

// reconcileIdentities creates the deployers and the applier in the plane, reads them
// back (content, not existence: an added rule or subject grants something), and keeps
// the applier kubeconfig Secret in the tenant namespace: a token from the TokenRequest
// API with a bounded lifetime, replaced once two thirds of it have passed, or at once
// when the applier ServiceAccount was recreated or the Secret's content is not what the
// operator wrote. Identities (the Secret among them) that were verified and are found
// changed are reported Drifted first, then restored. The cluster-autoscaler's identity
// and credential are kept with them while a node group autoscales.
func (r *Reconciler) reconcileIdentities(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.plane
	key := client.ObjectKeyFromObject(p)
	if s.quiet {
		if asLeft, err := r.credentialsAsLeft(ctx, s); err != nil || asLeft {
			return ctrl.Result{}, err
		}
	}
	plane, err := r.Planes.Get(ctx, key, s.admin)
	if err != nil {
		// Hardening has just talked to the plane; a failure here is transient.
		return ctrl.Result{}, err
	}
	if res, done, err := r.converge(ctx, s, identitiesConvergence(s, plane)); !done {
		return res, err
	}
	if err := r.unbindDroppedNamespaces(ctx, s, plane); err != nil {
		return ctrl.Result{}, err
	}
	expires, res, done, err := r.keepApplierCredential(ctx, s, plane)
	if !done {
		return res, err
	}
	rotateAt := expires.Add(-r.TokenLifetime / 3)
	autoscaler, err := r.reconcileAutoscaler(ctx, s, plane)
	if err != nil {
		return ctrl.Result{}, err
	}
	if autoscaler.conflict != "" {
		s.observe(cpv1.IdentitiesCondition, stageTerminal(cpv1.IdentitiesFailedReason, "%s", autoscaler.conflict))
		return ctrl.Result{RequeueAfter: r.jitter()}, nil
	}
	if !autoscaler.expires.IsZero() {
		rotateAt = minTime(rotateAt, autoscaler.expires.Add(-r.TokenLifetime/3))
	}
	if autoscaler.pending {
		rotateAt = minTime(rotateAt, time.Now().Add(r.jitter()))
	}
	r.setVerified(key, cpv1.IdentitiesCondition, true)
	if r.ResyncInterval > 0 && s.read.watched {
		// Every stage before this one was read in full and found as left in this pass.
		r.Planes.Settled(key, s.read.mark, s.read.fingerprint, minTime(time.Now().Add(r.ResyncInterval), rotateAt))
		ctrl.LoggerFrom(ctx).V(1).Info("the plane is as left: settled", "mark", s.read.mark)
	}
	s.observe(cpv1.IdentitiesCondition, stageTrue(cpv1.SucceededReason, fmt.Sprintf(
		"deployer %s/%s may deploy into %v; applier %s/%s may only impersonate it; its kubeconfig Secret %s expires at %s and is renewed at %s%s",
		p.Namespace, cpv1.DeployerName, tenancy.PlacementNamespaces(p), posture.ApplierNamespace, posture.ApplierName,
		tenancy.ApplierSecretName(p), expires.UTC().Format(time.RFC3339), expires.Add(-r.TokenLifetime/3).UTC().Format(time.RFC3339), autoscaler.message)))
	return ctrl.Result{RequeueAfter: max(time.Until(rotateAt), time.Second)}, nil
}

// credentialsAsLeft: on a quiet pass (read in full not long ago, nothing changed since,
// the token not due: Settled was told when it is), the identities need no read but of
// their credentials. The tenant may write the applier Secret, so every pass looks at it
// (its version, from its namespace's watch: secret_versions.go): found as the operator
// last left it, the pass is done; otherwise the identities are read in full. So with the
// cluster-autoscaler's.
func (r *Reconciler) credentialsAsLeft(ctx context.Context, s *scope) (bool, error) {
	asLeft, err := r.credentialAsLeft(ctx, s, r.applierCredential(s.plane))
	if err == nil && asLeft && render.Autoscaled(s.plane) {
		asLeft, err = r.credentialAsLeft(ctx, s, r.autoscalerCredential(s.plane))
	}
	return asLeft, err
}

// planeIdentities are the identity objects the operator keeps in the plane: the
// deployers and the applier, and the cluster-autoscaler's while a group autoscales.
func planeIdentities(s *scope) []client.Object {
	p := s.plane
	objs := posture.Identities([]string{p.Namespace}, tenancy.PlacementNamespaces(p), s.class.Spec.PlacementNamespaces.AllowPodExec, render.PlaneLabels(p))
	if render.Autoscaled(p) {
		objs = append(objs, posture.AutoscalerIdentity(render.PlaneLabels(p))...)
	}
	return objs
}

// identitiesConvergence keeps the identity objects in the plane as the operator writes
// them.
func identitiesConvergence(s *scope, plane *remote.Plane) convergence {
	objs := planeIdentities(s)
	unverified := func(ctx context.Context) ([]string, error) {
		return remote.UnverifiedIdentities(ctx, plane.Client, objs)
	}
	return convergence{
		stage:        cpv1.IdentitiesCondition,
		look:         unverified,
		restore:      func(ctx context.Context) error { return remote.ApplyIdentities(ctx, plane.Client, objs) },
		readBack:     unverified,
		notAsApplied: cpv1.IdentitiesFailedReason,
	}
}

// unbindDroppedNamespaces removes the deployer's Role and RoleBinding from namespaces no
// longer in spec.placementNamespaces.
func (r *Reconciler) unbindDroppedNamespaces(ctx context.Context, s *scope, plane *remote.Plane) error {
	p := s.plane
	unbound, err := remote.UnbindDeployer(ctx, plane.Client, tenancy.PlacementNamespaces(p), render.PlaneSelector(p))
	if len(unbound) > 0 {
		r.Events.Eventf(p, nil, corev1.EventTypeNormal, "DeployerUnbound", "Identities",
			"Namespaces no longer in spec.placementNamespaces: removed %s (their objects stay; placement releases may no longer write there)", strings.Join(unbound, ", "))
	}
	return err
}

// keepApplierCredential keeps the applier kubeconfig Secret as the operator writes it,
// with a token that is not due, and says when that token expires. done is false when the
// phase must return res: the Secret is another's (never overwritten), or it drifted on a
// verified plane (reported; the gate closes, revoking the applier's tokens, and a new
// credential is written next pass), or a drift repair backs off.
func (r *Reconciler) keepApplierCredential(ctx context.Context, s *scope, plane *remote.Plane) (expires time.Time, res ctrl.Result, done bool, err error) {
	p := s.plane
	cred := r.applierCredential(p)
	found, err := r.inspectCredential(ctx, s, plane, cred)
	if err != nil {
		return time.Time{}, ctrl.Result{}, false, err
	}
	if found.conflict != "" {
		s.observe(cpv1.IdentitiesCondition, stageTerminal(cpv1.IdentitiesFailedReason, "%s", found.conflict))
		return time.Time{}, ctrl.Result{RequeueAfter: r.jitter()}, false, nil
	}
	if found.changed != "" {
		// Flux may already be applying with what the Secret now holds.
		what := fmt.Sprintf("Secret %s/%s (%s)", p.Namespace, tenancy.ApplierSecretName(p), found.changed)
		wasVerified := r.wasVerified(client.ObjectKeyFromObject(p), cpv1.IdentitiesCondition, apimeta.IsStatusConditionTrue(p.Status.Conditions, cpv1.IdentitiesCondition))
		if res, proceed := r.beforeRepair(s, cpv1.IdentitiesCondition, []string{what}, wasVerified, func() {
			s.observe(cpv1.IdentitiesCondition, stageFalse(cpv1.DriftedReason, "%s changed; restoring", what))
		}); !proceed {
			return time.Time{}, res, false, nil
		}
	}
	if !found.rewrite() {
		return found.expires, ctrl.Result{}, true, nil
	}
	expires, err = r.writeCredential(ctx, s, plane, cred, found)
	return expires, ctrl.Result{}, err == nil, err
}
