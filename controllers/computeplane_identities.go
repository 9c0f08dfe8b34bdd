package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// back, and keeps the applier kubeconfig Secret in the tenant namespace: a token from the
// TokenRequest API with a bounded lifetime, replaced once two thirds of it have passed,
// or at once when the applier ServiceAccount was recreated.
func (r *ComputePlaneReconciler) reconcileIdentities(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.plane
	plane, err := r.Planes.Get(ctx, client.ObjectKeyFromObject(p), s.adminKubeconfig)
	if err != nil {
		// Hardening has just talked to the plane; a failure here is transient.
		return ctrl.Result{}, err
	}
	objs := remote.Identities([]string{p.Namespace}, placementNamespaces(p), s.class.Spec.PlacementNamespaces.AllowPodExec, render.PlaneLabels(p))
	for _, o := range objs {
		if _, err := remote.ApplyIfChanged(ctx, plane.Client, o, HardeningFieldOwner); err != nil {
			return ctrl.Result{}, err
		}
	}
	for _, o := range objs {
		if err := plane.Client.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object)); err != nil {
			s.observe(cpv1.IdentitiesCondition, stageFalse(IdentitiesFailedReason, "%s %s/%s is missing on read-back: %v",
				o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName(), err))
			return ctrl.Result{RequeueAfter: r.jitter()}, client.IgnoreNotFound(err)
		}
	}

	expires, err := r.ensureApplierSecret(ctx, s, plane)
	if err != nil {
		return ctrl.Result{}, err
	}
	rotateAt := expires.Add(-r.TokenLifetime / 3)
	s.observe(cpv1.IdentitiesCondition, stageTrue(cpv1.SucceededReason, fmt.Sprintf(
		"deployer %s/%s may deploy into %v; applier %s/%s may only impersonate it; its kubeconfig Secret %s expires at %s and is renewed at %s",
		p.Namespace, remote.DeployerName, placementNamespaces(p), remote.ApplierNamespace, remote.ApplierName,
		ApplierSecretName(p), expires.UTC().Format(time.RFC3339), rotateAt.UTC().Format(time.RFC3339))))
	return ctrl.Result{RequeueAfter: max(time.Until(rotateAt), time.Second)}, nil
}

// ensureApplierSecret issues a new token when the Secret is missing, its token is past
// two thirds of its lifetime, or it belongs to an earlier applier ServiceAccount. It
// returns when the token in the Secret expires.
func (r *ComputePlaneReconciler) ensureApplierSecret(ctx context.Context, s *scope, plane *remote.Plane) (time.Time, error) {
	p := s.plane
	sa := &corev1.ServiceAccount{}
	if err := plane.Client.Get(ctx, client.ObjectKey{Namespace: remote.ApplierNamespace, Name: remote.ApplierName}, sa); err != nil {
		return time.Time{}, err
	}
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: ApplierSecretName(p)}, secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return time.Time{}, err
	}
	exists := err == nil
	if exists {
		expires, perr := time.Parse(time.RFC3339, secret.Annotations[TokenExpiresAtAnnotation])
		if perr == nil && secret.Annotations[ApplierUIDAnnotation] == string(sa.UID) &&
			time.Until(expires) > r.TokenLifetime/3 && len(secret.Data[ApplierKubeconfigKey]) > 0 {
			return expires, nil
		}
	}

	token, err := remote.IssueApplierToken(ctx, plane.Client, r.TokenLifetime)
	if err != nil {
		return time.Time{}, err
	}
	kubeconfig, err := remote.ApplierKubeconfig(s.adminKubeconfig, token.Token)
	if err != nil {
		return time.Time{}, err
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
		return time.Time{}, err
	}
	if exists {
		err = r.Update(ctx, secret)
	} else {
		err = r.Create(ctx, secret)
	}
	if err != nil {
		return time.Time{}, err
	}
	r.Events.Eventf(p, nil, corev1.EventTypeNormal, "CredentialIssued", "Issue",
		"Applier kubeconfig %s issued, valid until %s", secret.Name, token.ExpiresAt.UTC().Format(time.RFC3339))
	return token.ExpiresAt, nil
}

// revokeApplierCredential deletes the applier kubeconfig Secret: with it gone, every
// release that references it fails closed (Flux applies nothing anywhere). It also
// removes the applier's right to impersonate in the plane, when the plane answers, so a
// copy of the token is worthless before it expires; reopening the gate restores both.
func (r *ComputePlaneReconciler) revokeApplierCredential(ctx context.Context, s *scope) error {
	p := s.plane
	// Look first (a read), so a plane that never had a credential makes no write.
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: ApplierSecretName(p)}, secret); err != nil {
		return client.IgnoreNotFound(err)
	}
	if err := r.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
		return err
	}
	unbound := "the plane did not answer, so its token stays valid until it expires"
	if plane, ok := r.Planes.Existing(client.ObjectKeyFromObject(p)); ok {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: remote.ApplierName}}
		if err := client.IgnoreNotFound(plane.Client.Delete(ctx, rb)); err == nil {
			unbound = "and its right to impersonate in the plane removed"
		}
	}
	r.Events.Eventf(p, nil, corev1.EventTypeWarning, "CredentialRevoked", "Revoke",
		"Applier kubeconfig %s deleted (the plane is not Ready), %s", secret.Name, unbound)
	return nil
}
