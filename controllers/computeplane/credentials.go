package computeplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/controllers/tenancy"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/remote/posture"
)

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
	mem credentialMemory
	// owned tells the plane's Secret from another of the same name (never adopted); own
	// makes a new Secret the plane's.
	owned func(*corev1.Secret) bool
	own   func(*corev1.Secret) error
	// issued counts the issues (nil: not counted).
	issued prometheus.Counter
}

// applierCredential is the applier kubeconfig: in the tenant namespace, owned by the
// plane (garbage collected with it), labelled for Flux to re-read it at once.
func (r *Reconciler) applierCredential(p *cpv1.ComputePlane) tokenCredential {
	return tokenCredential{
		what:    "Applier",
		secret:  client.ObjectKey{Namespace: p.Namespace, Name: tenancy.ApplierSecretName(p)},
		account: client.ObjectKey{Namespace: posture.ApplierNamespace, Name: posture.ApplierName},
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
func (r *Reconciler) autoscalerCredential(p *cpv1.ComputePlane) tokenCredential {
	return tokenCredential{
		what:    "Cluster-autoscaler",
		secret:  client.ObjectKey{Namespace: p.Status.InfrastructureNamespace, Name: render.AutoscalerKubeconfigSecretName(p)},
		account: client.ObjectKey{Namespace: posture.AutoscalerNamespace, Name: posture.AutoscalerName},
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
// writes: its content (credentialMismatch, skipped when it is exactly as last found
// or written), and whether its token is due.
func (r *Reconciler) inspectCredential(ctx context.Context, s *scope, plane *remote.Plane, cred tokenCredential) (credentialFound, error) {
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
	want := credentialWant{
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
		if credentialMismatch(secret, want) != "" {
			found.due = true
			return found, nil
		}
		cred.mem.remember(key, secret, s.admin.Hash)
	default:
		if found.changed = credentialMismatch(secret, want); found.changed != "" {
			return found, nil
		}
		cred.mem.remember(key, secret, s.admin.Hash)
	}
	expires, perr := time.Parse(time.RFC3339, secret.Annotations[cpv1.TokenExpiresAtAnnotation])
	found.due = perr != nil || secret.Annotations[cpv1.TokenServiceAccountUIDAnnotation] != string(sa.UID) || time.Until(expires) <= r.TokenLifetime/3
	found.expires = expires
	return found, nil
}

// ensureApplierSecret makes the applier Secret hold a current credential of the
// operator's making, writing it when it is missing, changed or due, without reporting
// drift: for the teardown, which needs Flux to uninstall. It returns when the token
// expires, or why it cannot write the Secret.
func (r *Reconciler) ensureApplierSecret(ctx context.Context, s *scope, plane *remote.Plane) (time.Time, string, error) {
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
func (r *Reconciler) credentialAsLeft(ctx context.Context, s *scope, cred tokenCredential) (bool, error) {
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
	labels[cpv1.FluxWatchLabel] = cpv1.FluxWatchLabelValue
	return labels
}

// writeCredential issues a new token and writes the credential's Secret with it
// (creates it when found none), and remembers what it wrote. It returns when the token
// expires.
func (r *Reconciler) writeCredential(ctx context.Context, s *scope, plane *remote.Plane, cred tokenCredential, found credentialFound) (time.Time, error) {
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
		cpv1.TokenExpiresAtAnnotation:         token.ExpiresAt.UTC().Format(time.RFC3339),
		cpv1.TokenServiceAccountUIDAnnotation: token.ServiceAccountUID,
	}
	secret.Type = corev1.SecretTypeOpaque
	secret.Data = map[string][]byte{cpv1.ApplierKubeconfigKey: kubeconfig}
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
func (r *Reconciler) revokeApplierCredential(ctx context.Context, s *scope) error {
	p := s.plane
	var revoked []string
	secret := &corev1.Secret{}
	secrets := r.secretsIn(ctx, p.Namespace, s)
	switch err := secrets.get(tenancy.ApplierSecretName(p), secret); {
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
