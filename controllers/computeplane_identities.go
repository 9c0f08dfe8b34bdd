package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
		// full below. So with the cluster-autoscaler's.
		asLeft, err := r.credentialAsLeft(ctx, s, r.applierCredential(p))
		if err == nil && asLeft && render.Autoscaled(p) {
			asLeft, err = r.credentialAsLeft(ctx, s, r.autoscalerCredential(p))
		}
		if err != nil || asLeft {
			return ctrl.Result{}, err
		}
	}
	plane, err := r.Planes.Get(ctx, key, s.admin)
	if err != nil {
		// Hardening has just talked to the plane; a failure here is transient.
		return ctrl.Result{}, err
	}
	objs := remote.Identities([]string{p.Namespace}, placementNamespaces(p), s.class.Spec.PlacementNamespaces.AllowPodExec, render.PlaneLabels(p))
	if render.Autoscaled(p) {
		objs = append(objs, remote.AutoscalerIdentity(render.PlaneLabels(p))...)
	}
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

	found, err := r.inspectCredential(ctx, s, plane, r.applierCredential(p))
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
		if expires, err = r.writeCredential(ctx, s, plane, r.applierCredential(p), found); err != nil {
			return ctrl.Result{}, err
		}
	}
	rotateAt := expires.Add(-r.TokenLifetime / 3)
	autoscaler, err := r.reconcileAutoscaler(ctx, s, plane)
	if err != nil {
		return ctrl.Result{}, err
	}
	if autoscaler.conflict != "" {
		s.observe(cpv1.IdentitiesCondition, stageTerminal(IdentitiesFailedReason, "%s", autoscaler.conflict))
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
		p.Namespace, remote.DeployerName, placementNamespaces(p), remote.ApplierNamespace, remote.ApplierName,
		render.ApplierSecretName(p), expires.UTC().Format(time.RFC3339), expires.Add(-r.TokenLifetime/3).UTC().Format(time.RFC3339), autoscaler.message)))
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

// tokenCredential is a kubeconfig Secret on the management cluster holding a bounded
// token of a ServiceAccount in the plane, from the plane's TokenRequest API: replaced
// once two thirds of its lifetime have passed, at once when the ServiceAccount was
// recreated or the Secret's content is not what the operator wrote. Two are issued: the
// applier's, in the tenant namespace, for Flux; and the cluster-autoscaler's, in the
// infrastructure namespace, while a node group autoscales.
type tokenCredential struct {
	// what names it in events.
	what string
	// secret is where the Secret lives; account is the ServiceAccount in the plane.
	secret, account client.ObjectKey
	// labels the Secret carries.
	labels map[string]string
	// mem is the digest of the Secret as last written or verified.
	mem applierMemory
	// owned tells the plane's Secret from another of the same name (never adopted); own
	// makes a new Secret the plane's.
	owned func(*corev1.Secret) bool
	own   func(*corev1.Secret) error
	// issued counts the issues (nil: not counted).
	issued prometheus.Counter
}

// applierCredential is the applier kubeconfig: in the tenant namespace, owned by the
// plane (garbage collected with it), labelled for Flux to re-read it at once.
func (r *ComputePlaneReconciler) applierCredential(p *cpv1.ComputePlane) tokenCredential {
	return tokenCredential{
		what:    "Applier",
		secret:  client.ObjectKey{Namespace: p.Namespace, Name: render.ApplierSecretName(p)},
		account: client.ObjectKey{Namespace: remote.ApplierNamespace, Name: remote.ApplierName},
		labels:  applierLabels(p),
		mem:     r.state.applierSecret(),
		owned:   func(s *corev1.Secret) bool { return metav1.IsControlledBy(s, p) },
		own:     func(s *corev1.Secret) error { return controllerutil.SetControllerReference(p, s, r.Scheme()) },
		issued:  credentialsIssued,
	}
}

// autoscalerCredential is the cluster-autoscaler's kubeconfig: in the infrastructure
// namespace (no owner reference crosses namespaces: the plane's labels mark it, and the
// operator deletes it), mounted by the autoscaler's Deployment.
func (r *ComputePlaneReconciler) autoscalerCredential(p *cpv1.ComputePlane) tokenCredential {
	return tokenCredential{
		what:    "Cluster-autoscaler",
		secret:  client.ObjectKey{Namespace: p.Status.InfrastructureNamespace, Name: render.AutoscalerKubeconfigSecretName(p)},
		account: client.ObjectKey{Namespace: remote.AutoscalerNamespace, Name: remote.AutoscalerName},
		labels:  render.PlaneLabels(p),
		mem:     r.state.autoscalerSecret(),
		owned:   func(s *corev1.Secret) bool { return s.Labels[cpv1.PlaneUIDLabel] == string(p.UID) },
		own:     func(*corev1.Secret) error { return nil },
	}
}

// credentialFound is what inspectCredential found of a credential's Secret.
type credentialFound struct {
	// secret as read; nil when there is none.
	secret *corev1.Secret
	// conflict: a Secret of that name exists and is not this plane's (never adopted).
	conflict string
	// changed says how the content differs from what the operator wrote ("" if not).
	changed string
	// due: the token is past two thirds of its lifetime or belongs to an earlier
	// ServiceAccount, or the kubeconfig was written against an earlier admin credential
	// whose server or CA it no longer matches.
	due bool
	// expires is when the Secret's token expires, when it is neither changed nor due.
	expires time.Time
}

// rewrite: the Secret is missing, changed or due for a new token.
func (f credentialFound) rewrite() bool { return f.secret == nil || f.changed != "" || f.due }

// inspectCredential reads a credential's Secret and compares it with what the operator
// writes: its content (applierSecretMismatch, skipped when it is exactly as last found
// or written), and whether its token is due.
func (r *ComputePlaneReconciler) inspectCredential(ctx context.Context, s *scope, plane *remote.Plane, cred tokenCredential) (credentialFound, error) {
	p := s.plane
	sa := &corev1.ServiceAccount{}
	if err := plane.Client.Get(ctx, cred.account, sa); err != nil {
		return credentialFound{}, err
	}
	secret := &corev1.Secret{}
	switch err := r.secretsIn(ctx, cred.secret.Namespace, s).get(cred.secret.Name, secret); {
	case apierrors.IsNotFound(err):
		return credentialFound{}, nil
	case err != nil:
		return credentialFound{}, err
	}
	if !cred.owned(secret) {
		return credentialFound{conflict: fmt.Sprintf("Secret %s exists and was not created for this ComputePlane; the operator never overwrites it: delete or rename it", cred.secret)}, nil
	}
	found := credentialFound{secret: secret}
	key := client.ObjectKeyFromObject(p)
	want := applierWant{
		labels:     cred.labels,
		subject:    "system:serviceaccount:" + cred.account.Namespace + ":" + cred.account.Name,
		kubeconfig: func(token string) ([]byte, error) { return remote.TokenKubeconfig(s.admin, cred.account.Name, token) },
	}
	switch ours, admin := cred.mem.recall(key, secret); {
	case ours && admin == s.admin.Hash:
		// Exactly as written or last verified: nothing to parse.
	case ours:
		// As the operator wrote it, against an earlier admin credential: a new server or
		// CA makes it due, no drift.
		if applierSecretMismatch(secret, want) != "" {
			found.due = true
			return found, nil
		}
		cred.mem.remember(key, secret, s.admin.Hash)
	default:
		if found.changed = applierSecretMismatch(secret, want); found.changed != "" {
			return found, nil
		}
		cred.mem.remember(key, secret, s.admin.Hash)
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
	cred := r.applierCredential(s.plane)
	found, err := r.inspectCredential(ctx, s, plane, cred)
	if err != nil || found.conflict != "" {
		return time.Time{}, found.conflict, err
	}
	if !found.rewrite() {
		return found.expires, "", nil
	}
	expires, err := r.writeCredential(ctx, s, plane, cred, found)
	return expires, "", err
}

// credentialAsLeft reports whether a credential's Secret is exactly as the operator
// last wrote or found it: one read of it, no parse.
func (r *ComputePlaneReconciler) credentialAsLeft(ctx context.Context, s *scope, cred tokenCredential) (bool, error) {
	p := s.plane
	secret := &corev1.Secret{}
	switch err := r.secretsIn(ctx, cred.secret.Namespace, s).get(cred.secret.Name, secret); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	// A quiet pass saw no change of the admin credential (it is in the plane's
	// fingerprint), so the content alone decides.
	ours, _ := cred.mem.recall(client.ObjectKeyFromObject(p), secret)
	return cred.owned(secret) && ours, nil
}

// applierLabels are the labels of the applier Secret: the plane's, and Flux's watch
// label (Flux re-reads a Secret with it as soon as it changes).
func applierLabels(p *cpv1.ComputePlane) map[string]string {
	labels := render.PlaneLabels(p)
	labels["reconcile.fluxcd.io/watch"] = "Enabled"
	return labels
}

// writeCredential issues a new token and writes the credential's Secret with it
// (creates it when found none), and remembers what it wrote. It returns when the token
// expires.
func (r *ComputePlaneReconciler) writeCredential(ctx context.Context, s *scope, plane *remote.Plane, cred tokenCredential, found credentialFound) (time.Time, error) {
	p := s.plane
	token, err := remote.IssueToken(ctx, plane.Client, cred.account, r.TokenLifetime)
	if err != nil {
		return time.Time{}, err
	}
	kubeconfig, err := remote.TokenKubeconfig(s.admin, cred.account.Name, token.Token)
	if err != nil {
		return time.Time{}, err
	}
	secret := found.secret
	if secret == nil {
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cred.secret.Namespace, Name: cred.secret.Name}}
	}
	secret.Labels = cred.labels
	secret.Annotations = map[string]string{
		cpv1.TokenExpiresAtAnnotation: token.ExpiresAt.UTC().Format(time.RFC3339),
		cpv1.ApplierUIDAnnotation:     token.ServiceAccountUID,
	}
	secret.Type = corev1.SecretTypeOpaque
	secret.Data = map[string][]byte{ApplierKubeconfigKey: kubeconfig}
	if err := cred.own(secret); err != nil {
		return time.Time{}, err
	}
	secrets := r.secretsIn(ctx, cred.secret.Namespace, s)
	if found.secret != nil {
		err = secrets.update(secret)
	} else {
		err = secrets.create(secret)
	}
	if err != nil {
		return time.Time{}, err
	}
	cred.mem.remember(client.ObjectKeyFromObject(p), secret, s.admin.Hash)
	if cred.issued != nil {
		cred.issued.Inc()
	}
	r.Events.Eventf(p, nil, corev1.EventTypeNormal, "CredentialIssued", "Issue",
		"%s kubeconfig %s issued, valid until %s", cred.what, secret.Name, token.ExpiresAt.UTC().Format(time.RFC3339))
	return token.ExpiresAt, nil
}

// revokeApplierCredential closes the gate's credential: it deletes the applier
// kubeconfig Secret (every release that references it then fails closed: Flux applies
// nothing anywhere) and, when the plane answers, the applier's impersonation bindings
// and ServiceAccount in the plane (remote.RevokeApplier: the bindings first, so any copy
// of a token, which a tenant can read from the Secret while the gate is open, stops
// writing at once), and the deployer's
// ServiceAccount, so no token requested for the deployer while the gate was open keeps
// writing either. Both halves run whether or not the other still had something to
// remove: a tenant that copied the token and deleted the Secret does not keep the token
// alive. It reads before it writes, so a closed gate costs no write; reopening the gate
// recreates the identities (the deployer with a new UID) and issues a new token.
func (r *ComputePlaneReconciler) revokeApplierCredential(ctx context.Context, s *scope) error {
	p := s.plane
	var revoked []string
	secret := &corev1.Secret{}
	secrets := r.secretsIn(ctx, p.Namespace, s)
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
func (r *ComputePlaneReconciler) reconcileAutoscaler(ctx context.Context, s *scope, plane *remote.Plane) (autoscalerIssued, error) {
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
		r.Events.Eventf(p, nil, corev1.EventTypeWarning, DriftedReason, "Drift",
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
		r.Events.Eventf(p, nil, corev1.EventTypeWarning, DriftedReason, "Drift",
			"Restored what someone changed in %s", strings.Join(restored, ", "))
	}
	if err != nil {
		return autoscalerIssued{}, err
	}
	return autoscalerIssued{expires: expires, message: fmt.Sprintf(
		"; cluster-autoscaler %s/%s has its own rights in the plane, its kubeconfig Secret %s expires at %s",
		remote.AutoscalerNamespace, remote.AutoscalerName, cred.secret, expires.UTC().Format(time.RFC3339))}, nil
}
