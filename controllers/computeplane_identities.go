package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/remote"
)

// Annotations on the applier kubeconfig Secret.
const (
	// TokenExpiresAtAnnotation is when the token in the Secret expires (RFC 3339).
	TokenExpiresAtAnnotation = "computeplane.cozystack.io/token-expires-at"
	// ApplierUIDAnnotation is the UID of the applier ServiceAccount the token is bound to.
	ApplierUIDAnnotation = "computeplane.cozystack.io/applier-uid"
	// ApplierKubeconfigKey is the Secret key Flux reads by default.
	ApplierKubeconfigKey = "value"
	// IdentitiesFailedReason: the identities could not be applied or verified.
	IdentitiesFailedReason = "IdentitiesNotVerified"
)

// ApplierSecretName is the applier kubeconfig Secret in the tenant namespace, which
// placement releases reference as spec.kubeConfig.secretRef.
func ApplierSecretName(p *cpv1.ComputePlane) string { return p.Name + "-applier-kubeconfig" }

// reconcileIdentities creates the deployers and the applier in the plane, reads them
// back (content, not existence: an added rule or subject grants something), and keeps
// the applier kubeconfig Secret in the tenant namespace: a token from the TokenRequest
// API with a bounded lifetime, replaced once two thirds of it have passed, or at once
// when the applier ServiceAccount was recreated. Identities that were verified and are
// found changed are reported Drifted first, then restored.
func (r *ComputePlaneReconciler) reconcileIdentities(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.plane
	key := client.ObjectKeyFromObject(p)
	if s.quiet {
		// Read in full not long ago, nothing changed since, and the token is not due
		// (Settled was told when it is).
		return ctrl.Result{}, nil
	}
	plane, err := r.Planes.Get(ctx, key, s.admin)
	if err != nil {
		// Hardening has just talked to the plane; a failure here is transient.
		return ctrl.Result{}, err
	}
	objs := remote.Identities([]string{p.Namespace}, placementNamespaces(p), s.class.Spec.PlacementNamespaces.AllowPodExec, render.PlaneLabels(p))
	changed, err := unverifiedIdentities(ctx, plane.Client, objs)
	if err != nil {
		return ctrl.Result{}, err
	}
	wasVerified := r.Planes.WasVerified(key, cpv1.IdentitiesCondition, apimeta.IsStatusConditionTrue(p.Status.Conditions, cpv1.IdentitiesCondition))
	if len(changed) > 0 && wasVerified {
		return r.reportDrift(s, key, cpv1.IdentitiesCondition, changed, func() {
			s.observe(cpv1.IdentitiesCondition, stageFalse(DriftedReason, "%s removed or changed; restoring", strings.Join(changed, ", ")))
		}), nil
	}
	if len(changed) > 0 {
		if wait := r.Planes.RepairWait(key, time.Now()); wait > 0 {
			s.waiting = true
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		for _, o := range objs {
			if _, err := remote.Apply(ctx, plane.Client, o, HardeningFieldOwner, remote.ExactFields(o)...); err != nil {
				return ctrl.Result{}, err
			}
		}
		if changed, err = unverifiedIdentities(ctx, plane.Client, objs); err != nil {
			return ctrl.Result{}, err
		}
		if len(changed) > 0 {
			s.observe(cpv1.IdentitiesCondition, stageFalse(IdentitiesFailedReason, "%s not as applied on read-back", strings.Join(changed, ", ")))
			s.waiting = true
			return ctrl.Result{RequeueAfter: r.jitter()}, nil
		}
	}

	expires, conflict, err := r.ensureApplierSecret(ctx, s, plane)
	if err != nil {
		return ctrl.Result{}, err
	}
	if conflict != "" {
		s.observe(cpv1.IdentitiesCondition, stageTerminal(IdentitiesFailedReason, "%s", conflict))
		return ctrl.Result{RequeueAfter: r.jitter()}, nil
	}
	r.Planes.SetVerified(key, cpv1.IdentitiesCondition, true)
	rotateAt := expires.Add(-r.TokenLifetime / 3)
	if r.ResyncInterval > 0 && s.read.watched {
		// Every stage before this one was read in full and found as left in this pass.
		r.Planes.Settled(key, s.read.mark, s.read.fingerprint, minTime(time.Now().Add(r.ResyncInterval), rotateAt))
		ctrl.LoggerFrom(ctx).V(1).Info("the plane is as left: settled", "mark", s.read.mark)
	}
	s.observe(cpv1.IdentitiesCondition, stageTrue(cpv1.SucceededReason, fmt.Sprintf(
		"deployer %s/%s may deploy into %v; applier %s/%s may only impersonate it; its kubeconfig Secret %s expires at %s and is renewed at %s",
		p.Namespace, remote.DeployerName, placementNamespaces(p), remote.ApplierNamespace, remote.ApplierName,
		ApplierSecretName(p), expires.UTC().Format(time.RFC3339), rotateAt.UTC().Format(time.RFC3339))))
	return ctrl.Result{RequeueAfter: max(time.Until(rotateAt), time.Second)}, nil
}

// unverifiedIdentities lists the identity objects that are missing or differ from what
// the operator writes, reading the plane directly.
func unverifiedIdentities(ctx context.Context, c client.Client, objs []client.Object) ([]string, error) {
	var out []string
	for _, o := range objs {
		ok, err := remote.Verify(ctx, c, o, remote.ExactFields(o)...)
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s %s/%s", o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName()))
		}
	}
	return out, nil
}

// ensureApplierSecret issues a new token when the Secret is missing, its token is past
// two thirds of its lifetime, or it belongs to an earlier applier ServiceAccount. It
// returns when the token in the Secret expires, or why it cannot write the Secret (one
// of that name exists and is not this plane's: never adopted).
func (r *ComputePlaneReconciler) ensureApplierSecret(ctx context.Context, s *scope, plane *remote.Plane) (time.Time, string, error) {
	p := s.plane
	sa := &corev1.ServiceAccount{}
	if err := plane.Client.Get(ctx, client.ObjectKey{Namespace: remote.ApplierNamespace, Name: remote.ApplierName}, sa); err != nil {
		return time.Time{}, "", err
	}
	secret := &corev1.Secret{}
	secrets := r.secretsIn(ctx, p.Namespace)
	err := secrets.get(ApplierSecretName(p), secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return time.Time{}, "", err
	}
	exists := err == nil
	if exists && !metav1.IsControlledBy(secret, p) {
		return time.Time{}, fmt.Sprintf("Secret %s/%s exists and was not created for this ComputePlane; the operator never overwrites it: delete or rename it", p.Namespace, secret.Name), nil
	}
	if exists {
		expires, perr := time.Parse(time.RFC3339, secret.Annotations[TokenExpiresAtAnnotation])
		if perr == nil && secret.Annotations[ApplierUIDAnnotation] == string(sa.UID) &&
			time.Until(expires) > r.TokenLifetime/3 && len(secret.Data[ApplierKubeconfigKey]) > 0 {
			return expires, "", nil
		}
	}

	token, err := remote.IssueApplierToken(ctx, plane.Client, r.TokenLifetime)
	if err != nil {
		return time.Time{}, "", err
	}
	kubeconfig, err := remote.ApplierKubeconfig(s.admin, token.Token)
	if err != nil {
		return time.Time{}, "", err
	}
	if !exists {
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: ApplierSecretName(p)}}
	}
	secret.Labels = render.PlaneLabels(p)
	// Flux re-reads a Secret with this label as soon as it changes.
	secret.Labels["reconcile.fluxcd.io/watch"] = "Enabled"
	secret.Annotations = map[string]string{
		TokenExpiresAtAnnotation: token.ExpiresAt.UTC().Format(time.RFC3339),
		ApplierUIDAnnotation:     token.ServiceAccountUID,
	}
	secret.Type = corev1.SecretTypeOpaque
	secret.Data = map[string][]byte{ApplierKubeconfigKey: kubeconfig}
	if err := controllerutil.SetControllerReference(p, secret, r.Scheme()); err != nil {
		return time.Time{}, "", err
	}
	if exists {
		err = secrets.update(secret)
	} else {
		err = secrets.create(secret)
	}
	if err != nil {
		return time.Time{}, "", err
	}
	credentialsIssued.Inc()
	r.Events.Eventf(p, nil, corev1.EventTypeNormal, "CredentialIssued", "Issue",
		"Applier kubeconfig %s issued, valid until %s", secret.Name, token.ExpiresAt.UTC().Format(time.RFC3339))
	return token.ExpiresAt, "", nil
}

// revokeApplierCredential closes the gate's credential: it deletes the applier
// kubeconfig Secret (every release that references it then fails closed: Flux applies
// nothing anywhere) and, when the plane answers, the applier ServiceAccount and its
// impersonation bindings in the plane, so any copy of a token (a tenant can read the
// Secret while the gate is open) stops working at once. Both halves run whether or not
// the other still had something to remove: a tenant that copied the token and deleted the
// Secret does not keep the token alive. It reads before it writes, so a closed gate costs
// no write; reopening the gate recreates the identities and issues a new token.
func (r *ComputePlaneReconciler) revokeApplierCredential(ctx context.Context, s *scope) error {
	p := s.plane
	var revoked []string
	secret := &corev1.Secret{}
	secrets := r.secretsIn(ctx, p.Namespace)
	switch err := secrets.get(ApplierSecretName(p), secret); {
	case apierrors.IsNotFound(err):
	case errors.Is(err, errNamespaceTerminating):
		// The Secret goes with its namespace; the token dies with the ServiceAccount below.
	case err != nil:
		return err
	case metav1.IsControlledBy(secret, p):
		if err := secrets.delete(secret); err != nil {
			return err
		}
		revoked = append(revoked, "Secret "+p.Namespace+"/"+secret.Name)
	}
	unbound := ""
	if plane, ok := r.Planes.Existing(ctx, client.ObjectKeyFromObject(p)); ok {
		removed, err := remote.RevokeApplier(ctx, plane.Client, []string{p.Namespace}, render.PlaneSelector(p))
		revoked = append(revoked, removed...)
		if len(removed) > 0 {
			// Gone by the operator's own hand: recreating them is no repair of drift.
			r.Planes.SetVerified(client.ObjectKeyFromObject(p), cpv1.IdentitiesCondition, false)
		}
		if err != nil {
			unbound = fmt.Sprintf("; the plane refused removing the applier (%v), so its token stays valid until it expires or the plane answers", err)
		}
	} else if len(revoked) > 0 {
		unbound = "; the plane does not answer, so the applier's token is taken away when it does (it is useless until then)"
	}
	if len(revoked) > 0 {
		reason := "GateClosed"
		if !p.DeletionTimestamp.IsZero() {
			reason = "Teardown"
		}
		credentialsRevoked.WithLabelValues(reason).Inc()
	}
	if len(revoked) > 0 || unbound != "" {
		r.Events.Eventf(p, nil, corev1.EventTypeWarning, "CredentialRevoked", "Revoke",
			"The plane is not Ready: removed %s%s", strings.Join(revoked, ", "), unbound)
	}
	return nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
