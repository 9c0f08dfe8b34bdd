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
	"github.com/cozystack/computeplane/internal/ssa"
	"github.com/cozystack/computeplane/remote"
)

const (
	// ApplierKubeconfigKey is the Secret key Flux reads by default.
	ApplierKubeconfigKey = "value"
	// IdentitiesFailedReason: the identities could not be applied or verified.
	IdentitiesFailedReason = "IdentitiesNotVerified"
)

// reconcileIdentities creates the deployers and the applier in the plane, reads them
// back (content, not existence: an added rule or subject grants something), and keeps
// the applier kubeconfig Secret in the tenant namespace: a token from the TokenRequest
// API with a bounded lifetime, replaced once two thirds of it have passed, or at once
// when the applier ServiceAccount was recreated or the Secret's content is not what the
// operator wrote. Identities (the Secret among them) that were verified and are found
// changed are reported Drifted first, then restored.
func (r *ComputePlaneReconciler) reconcileIdentities(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.plane
	key := client.ObjectKeyFromObject(p)
	if s.quiet {
		// Read in full not long ago, nothing changed since, and the token is not due
		// (Settled was told when it is). The tenant may write the applier Secret, so every
		// pass looks at it (its version, from its namespace's watch: secret_versions.go):
		// found as the operator last left it, the pass is done; otherwise it is read in
		// full below.
		if asLeft, err := r.applierSecretAsLeft(ctx, p); err != nil || asLeft {
			return ctrl.Result{}, err
		}
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
	wasVerified := r.wasVerified(key, cpv1.IdentitiesCondition, apimeta.IsStatusConditionTrue(p.Status.Conditions, cpv1.IdentitiesCondition))
	if len(changed) > 0 && wasVerified {
		return r.reportDrift(s, key, cpv1.IdentitiesCondition, changed, func() {
			s.observe(cpv1.IdentitiesCondition, stageFalse(DriftedReason, "%s removed or changed; restoring", strings.Join(changed, ", ")))
		}), nil
	}
	if len(changed) > 0 {
		if wait := r.repairWait(key, time.Now()); wait > 0 {
			s.waiting = true
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		for _, o := range objs {
			if _, err := ssa.Apply(ctx, plane.Client, o, HardeningFieldOwner, remote.ExactFields(o)...); err != nil {
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

	unbound, err := remote.UnbindDeployer(ctx, plane.Client, placementNamespaces(p), render.PlaneSelector(p))
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(unbound) > 0 {
		r.Events.Eventf(p, nil, corev1.EventTypeNormal, "DeployerUnbound", "Identities",
			"Namespaces no longer in spec.placementNamespaces: removed %s (their objects stay; placement releases may no longer write there)", strings.Join(unbound, ", "))
	}

	found, err := r.inspectApplierSecret(ctx, s, plane)
	if err != nil {
		return ctrl.Result{}, err
	}
	if found.conflict != "" {
		s.observe(cpv1.IdentitiesCondition, stageTerminal(IdentitiesFailedReason, "%s", found.conflict))
		return ctrl.Result{RequeueAfter: r.jitter()}, nil
	}
	if found.changed != "" {
		what := fmt.Sprintf("Secret %s/%s (%s)", p.Namespace, render.ApplierSecretName(p), found.changed)
		if wasVerified {
			// Flux may already be applying with what the Secret now holds: the gate closes
			// (revoking the applier's tokens) and a new credential is written.
			return r.reportDrift(s, key, cpv1.IdentitiesCondition, []string{what}, func() {
				s.observe(cpv1.IdentitiesCondition, stageFalse(DriftedReason, "%s changed; restoring", what))
			}), nil
		}
		if wait := r.repairWait(key, time.Now()); wait > 0 {
			s.waiting = true
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	expires := found.expires
	if found.rewrite() {
		if expires, err = r.writeApplierSecret(ctx, s, plane, found); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.setVerified(key, cpv1.IdentitiesCondition, true)
	rotateAt := expires.Add(-r.TokenLifetime / 3)
	if r.ResyncInterval > 0 && s.read.watched {
		// Every stage before this one was read in full and found as left in this pass.
		r.Planes.Settled(key, s.read.mark, s.read.fingerprint, minTime(time.Now().Add(r.ResyncInterval), rotateAt))
		ctrl.LoggerFrom(ctx).V(1).Info("the plane is as left: settled", "mark", s.read.mark)
	}
	s.observe(cpv1.IdentitiesCondition, stageTrue(cpv1.SucceededReason, fmt.Sprintf(
		"deployer %s/%s may deploy into %v; applier %s/%s may only impersonate it; its kubeconfig Secret %s expires at %s and is renewed at %s",
		p.Namespace, remote.DeployerName, placementNamespaces(p), remote.ApplierNamespace, remote.ApplierName,
		render.ApplierSecretName(p), expires.UTC().Format(time.RFC3339), rotateAt.UTC().Format(time.RFC3339))))
	return ctrl.Result{RequeueAfter: max(time.Until(rotateAt), time.Second)}, nil
}

// unverifiedIdentities lists the identity objects that are missing or differ from what
// the operator writes, reading the plane directly.
func unverifiedIdentities(ctx context.Context, c client.Client, objs []client.Object) ([]string, error) {
	var out []string
	for _, o := range objs {
		ok, err := ssa.Verify(ctx, c, o, remote.ExactFields(o)...)
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s %s/%s", o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName()))
		}
	}
	return out, nil
}

// applierFound is what inspectApplierSecret found of the applier Secret.
type applierFound struct {
	// secret as read; nil when there is none.
	secret *corev1.Secret
	// conflict: a Secret of that name exists and is not this plane's (never adopted).
	conflict string
	// changed says how the content differs from what the operator wrote ("" if not).
	changed string
	// due: the token is past two thirds of its lifetime or belongs to an earlier
	// applier ServiceAccount, or the kubeconfig was written against an earlier admin
	// credential whose server or CA it no longer matches.
	due bool
	// expires is when the Secret's token expires, when it is neither changed nor due.
	expires time.Time
}

// rewrite: the Secret is missing, changed or due for a new token.
func (f applierFound) rewrite() bool { return f.secret == nil || f.changed != "" || f.due }

// inspectApplierSecret reads the applier Secret and compares it with what the operator
// writes: its content (applierSecretMismatch, skipped when it is exactly as last found
// or written), and whether its token is due.
func (r *ComputePlaneReconciler) inspectApplierSecret(ctx context.Context, s *scope, plane *remote.Plane) (applierFound, error) {
	p := s.plane
	sa := &corev1.ServiceAccount{}
	if err := plane.Client.Get(ctx, client.ObjectKey{Namespace: remote.ApplierNamespace, Name: remote.ApplierName}, sa); err != nil {
		return applierFound{}, err
	}
	secret := &corev1.Secret{}
	switch err := r.secretsIn(ctx, p.Namespace, client.ObjectKeyFromObject(p)).get(render.ApplierSecretName(p), secret); {
	case apierrors.IsNotFound(err):
		return applierFound{}, nil
	case err != nil:
		return applierFound{}, err
	}
	if !metav1.IsControlledBy(secret, p) {
		return applierFound{conflict: fmt.Sprintf("Secret %s/%s exists and was not created for this ComputePlane; the operator never overwrites it: delete or rename it", p.Namespace, secret.Name)}, nil
	}
	found := applierFound{secret: secret}
	key := client.ObjectKeyFromObject(p)
	want := applierWant{
		labels:     applierLabels(p),
		kubeconfig: func(token string) ([]byte, error) { return remote.ApplierKubeconfig(s.admin, token) },
	}
	switch ours, admin := r.applierMem.recall(key, secret); {
	case ours && admin == s.admin.Hash:
		// Exactly as written or last verified: nothing to parse.
	case ours:
		// As the operator wrote it, against an earlier admin credential: a new server or
		// CA makes it due, no drift.
		if applierSecretMismatch(secret, want) != "" {
			found.due = true
			return found, nil
		}
		r.applierMem.remember(key, secret, s.admin.Hash)
	default:
		if found.changed = applierSecretMismatch(secret, want); found.changed != "" {
			return found, nil
		}
		r.applierMem.remember(key, secret, s.admin.Hash)
	}
	expires, perr := time.Parse(time.RFC3339, secret.Annotations[cpv1.TokenExpiresAtAnnotation])
	found.due = perr != nil || secret.Annotations[cpv1.ApplierUIDAnnotation] != string(sa.UID) || time.Until(expires) <= r.TokenLifetime/3
	found.expires = expires
	return found, nil
}

// ensureApplierSecret makes the applier Secret hold a current credential of the
// operator's making, writing it when it is missing, changed or due, without reporting
// drift: for the teardown, which needs Flux to uninstall. It returns when the token
// expires, or why it cannot write the Secret.
func (r *ComputePlaneReconciler) ensureApplierSecret(ctx context.Context, s *scope, plane *remote.Plane) (time.Time, string, error) {
	found, err := r.inspectApplierSecret(ctx, s, plane)
	if err != nil || found.conflict != "" {
		return time.Time{}, found.conflict, err
	}
	if !found.rewrite() {
		return found.expires, "", nil
	}
	expires, err := r.writeApplierSecret(ctx, s, plane, found)
	return expires, "", err
}

// applierSecretAsLeft reports whether the applier Secret is exactly as the operator
// last wrote or found it: one read of it, no parse.
func (r *ComputePlaneReconciler) applierSecretAsLeft(ctx context.Context, p *cpv1.ComputePlane) (bool, error) {
	secret := &corev1.Secret{}
	switch err := r.secretsIn(ctx, p.Namespace, client.ObjectKeyFromObject(p)).get(render.ApplierSecretName(p), secret); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	// A quiet pass saw no change of the admin credential (it is in the plane's
	// fingerprint), so the content alone decides.
	ours, _ := r.applierMem.recall(client.ObjectKeyFromObject(p), secret)
	return metav1.IsControlledBy(secret, p) && ours, nil
}

// applierLabels are the labels of the applier Secret: the plane's, and Flux's watch
// label (Flux re-reads a Secret with it as soon as it changes).
func applierLabels(p *cpv1.ComputePlane) map[string]string {
	labels := render.PlaneLabels(p)
	labels["reconcile.fluxcd.io/watch"] = "Enabled"
	return labels
}

// writeApplierSecret issues a new token and writes the applier Secret with it (creates
// it when found none), and remembers what it wrote. It returns when the token expires.
func (r *ComputePlaneReconciler) writeApplierSecret(ctx context.Context, s *scope, plane *remote.Plane, found applierFound) (time.Time, error) {
	p := s.plane
	token, err := remote.IssueApplierToken(ctx, plane.Client, r.TokenLifetime)
	if err != nil {
		return time.Time{}, err
	}
	kubeconfig, err := remote.ApplierKubeconfig(s.admin, token.Token)
	if err != nil {
		return time.Time{}, err
	}
	secret := found.secret
	if secret == nil {
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.ApplierSecretName(p)}}
	}
	secret.Labels = applierLabels(p)
	secret.Annotations = map[string]string{
		cpv1.TokenExpiresAtAnnotation: token.ExpiresAt.UTC().Format(time.RFC3339),
		cpv1.ApplierUIDAnnotation:     token.ServiceAccountUID,
	}
	secret.Type = corev1.SecretTypeOpaque
	secret.Data = map[string][]byte{ApplierKubeconfigKey: kubeconfig}
	if err := controllerutil.SetControllerReference(p, secret, r.Scheme()); err != nil {
		return time.Time{}, err
	}
	secrets := r.secretsIn(ctx, p.Namespace, client.ObjectKeyFromObject(p))
	if found.secret != nil {
		err = secrets.update(secret)
	} else {
		err = secrets.create(secret)
	}
	if err != nil {
		return time.Time{}, err
	}
	r.applierMem.remember(client.ObjectKeyFromObject(p), secret, s.admin.Hash)
	credentialsIssued.Inc()
	r.Events.Eventf(p, nil, corev1.EventTypeNormal, "CredentialIssued", "Issue",
		"Applier kubeconfig %s issued, valid until %s", secret.Name, token.ExpiresAt.UTC().Format(time.RFC3339))
	return token.ExpiresAt, nil
}

// revokeApplierCredential closes the gate's credential: it deletes the applier
// kubeconfig Secret (every release that references it then fails closed: Flux applies
// nothing anywhere) and, when the plane answers, the applier ServiceAccount and its
// impersonation bindings in the plane, so any copy of a token (a tenant can read the
// Secret while the gate is open) stops working at once, and the deployer's
// ServiceAccount, so no token requested for the deployer while the gate was open keeps
// writing either. Both halves run whether or not the other still had something to
// remove: a tenant that copied the token and deleted the Secret does not keep the token
// alive. It reads before it writes, so a closed gate costs no write; reopening the gate
// recreates the identities (the deployer with a new UID) and issues a new token.
func (r *ComputePlaneReconciler) revokeApplierCredential(ctx context.Context, s *scope) error {
	p := s.plane
	var revoked []string
	secret := &corev1.Secret{}
	secrets := r.secretsIn(ctx, p.Namespace, client.ObjectKeyFromObject(p))
	switch err := secrets.get(render.ApplierSecretName(p), secret); {
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
			r.setVerified(client.ObjectKeyFromObject(p), cpv1.IdentitiesCondition, false)
		}
		if err != nil {
			unbound = fmt.Sprintf("; the plane refused removing the applier or the deployer (%v), so their tokens stay valid until they expire or the plane answers", err)
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
