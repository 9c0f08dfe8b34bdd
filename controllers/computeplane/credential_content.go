package computeplane

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// The applier Secret lives in the tenant namespace, where the tenant may write Secrets
// (the built-in edit role allows it), and Flux applies with whatever it holds. So its
// content is compared with what the operator writes, not only its expiry annotation:
// a kubeconfig pointed at another server (the management API, another plane) or holding
// another credential is drift.

// tokenExpiryTolerance is how far the token's own expiry (its exp claim) may be from
// the one the Secret announces: the plane's API server stamps the two from separate
// reads of its clock.
const tokenExpiryTolerance = time.Minute

// credentialWant is what the operator writes into the applier Secret, and so what it
// compares the Secret with.
type credentialWant struct {
	// labels the Secret carries (the plane's, and for the applier Flux's watch label).
	labels map[string]string
	// subject is the user name of the ServiceAccount the token must be issued to.
	subject string
	// kubeconfig is the kubeconfig the operator writes for a token: the plane's server
	// and CA, that token as the only credential.
	kubeconfig func(token string) ([]byte, error)
}

// credentialMismatch says how the Secret differs from what the operator writes into
// it, or "" if it does not: only the key Flux reads, holding exactly the kubeconfig the
// operator builds for the token in it, that token the applier ServiceAccount's (of the
// UID the Secret's annotation names) and expiring when the annotation says, and the
// operator's labels. Whether that ServiceAccount is still the current one, and the
// token not due, is the rotation's question, not this one.
func credentialMismatch(secret *corev1.Secret, want credentialWant) string {
	if secret.Type != corev1.SecretTypeOpaque {
		return "type " + string(secret.Type)
	}
	if keys := slices.Sorted(maps.Keys(secret.Data)); len(keys) != 1 || keys[0] != cpv1.ApplierKubeconfigKey {
		return fmt.Sprintf("keys %v", keys)
	}
	for k, v := range want.labels {
		if got, ok := secret.Labels[k]; !ok || got != v {
			return "label " + k
		}
	}
	uid := secret.Annotations[cpv1.TokenServiceAccountUIDAnnotation]
	if uid == "" {
		return "annotation " + cpv1.TokenServiceAccountUIDAnnotation
	}
	expires, err := time.Parse(time.RFC3339, secret.Annotations[cpv1.TokenExpiresAtAnnotation])
	if err != nil {
		return "annotation " + cpv1.TokenExpiresAtAnnotation
	}
	value := secret.Data[cpv1.ApplierKubeconfigKey]
	token, err := kubeconfigToken(value)
	if err != nil {
		return "kubeconfig: " + err.Error()
	}
	if why := tokenMismatch(token, want.subject, uid, expires); why != "" {
		return "token: " + why
	}
	built, err := want.kubeconfig(token)
	if err != nil {
		return "kubeconfig: " + err.Error()
	}
	if !bytes.Equal(built, value) {
		// Server, CA, TLS settings, proxies, exec plugins, token files: anything not
		// written by the operator.
		return "kubeconfig: not the plane's server, CA and applier token alone"
	}
	return ""
}

// kubeconfigToken is the bearer token of the kubeconfig's current context.
func kubeconfigToken(kubeconfig []byte) (string, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return "", fmt.Errorf("does not parse: %w", err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return "", fmt.Errorf("no current context")
	}
	user, ok := cfg.AuthInfos[ctx.AuthInfo]
	if !ok || user.Token == "" {
		return "", fmt.Errorf("no token")
	}
	return user.Token, nil
}

// serviceAccountClaims are the claims of a Kubernetes ServiceAccount token the operator
// compares (k8s.io/kubernetes pkg/serviceaccount/claims.go).
type serviceAccountClaims struct {
	Subject string `json:"sub"`
	Expiry  int64  `json:"exp"`
	K8s     struct {
		ServiceAccount struct {
			UID string `json:"uid"`
		} `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

// tokenMismatch says why token is not a token of the plane's ServiceAccount
// subject (of UID uid: the applier's, or the autoscaler's) expiring at expires, or "". The signature is not checked here:
// the plane checks it on every request, and a forged token only fails there. What this
// catches is a genuine token of another identity (another ServiceAccount of the plane),
// or of an earlier applier, put in its place.
func tokenMismatch(token, subject, uid string, expires time.Time) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "not a JWT"
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "not a JWT"
	}
	var c serviceAccountClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return "not a JWT"
	}
	if c.Subject != subject {
		return "issued to " + c.Subject
	}
	if c.K8s.ServiceAccount.UID != uid {
		return "issued to an earlier " + subject
	}
	// An annotation earlier than the token's own expiry only brings its rotation forward
	// (in place, as when it is due); a later one would let the token lapse unrenewed.
	if d := time.Unix(c.Expiry, 0).Sub(expires); d < -tokenExpiryTolerance {
		return "expires at " + time.Unix(c.Expiry, 0).UTC().Format(time.RFC3339) + ", not as annotated"
	}
	return ""
}

// credentialDigest identifies the content of an applier Secret that credentialMismatch
// looks at, so a Secret already found as written is not parsed again.
func credentialDigest(secret *corev1.Secret) [sha256.Size]byte {
	h := sha256.New()
	field := func(s string) {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	field(string(secret.Type))
	for _, k := range slices.Sorted(maps.Keys(secret.Data)) {
		field(k)
		field(string(secret.Data[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(secret.Labels)) {
		field(k)
		field(secret.Labels[k])
	}
	field(secret.Annotations[cpv1.TokenServiceAccountUIDAnnotation])
	field(secret.Annotations[cpv1.TokenExpiresAtAnnotation])
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// credentialSeen is what a plane's state remembers of one of its credential Secrets (the
// applier's, the cluster-autoscaler's): the digest of the Secret as the operator last
// wrote or verified it, and the admin credential (its Hash) it was compared with: about
// 100 bytes a plane, never the token. A pass that finds the same content against the
// same credential needs no parse; a restarted operator verifies once by content.
type credentialSeen struct {
	// held: a digest is remembered.
	held  bool
	sum   [sha256.Size]byte
	admin string
}

// credentialMemory is one credential Secret's credentialSeen in every plane's state: slot picks
// which (planeStates.applierSecret, planeStates.autoscalerSecret).
type credentialMemory struct {
	states *planeStates
	slot   func(*planeState) *credentialSeen
}

// applierSecret is the applier Secret's digest in each plane's state.
func (m *planeStates) applierSecret() credentialMemory {
	return credentialMemory{states: m, slot: func(s *planeState) *credentialSeen { return &s.applier }}
}

// autoscalerSecret is the same of each plane's cluster-autoscaler kubeconfig Secret.
func (m *planeStates) autoscalerSecret() credentialMemory {
	return credentialMemory{states: m, slot: func(s *planeState) *credentialSeen { return &s.autoscaler }}
}

func (m credentialMemory) remember(key client.ObjectKey, secret *corev1.Secret, admin string) {
	seen := credentialSeen{held: true, sum: credentialDigest(secret), admin: admin}
	m.states.with(key, func(s *planeState) { *m.slot(s) = seen })
}

// recall says whether the Secret is exactly as last remembered for the plane (ours),
// and the admin credential it was compared with then. It never makes state.
func (m credentialMemory) recall(key client.ObjectKey, secret *corev1.Secret) (ours bool, admin string) {
	sum := credentialDigest(secret)
	m.states.peek(key, func(s *planeState) {
		if s == nil {
			return
		}
		last := m.slot(s)
		ours, admin = last.held && last.sum == sum, last.admin
	})
	return ours, admin
}

// forget drops the digest (the Secret is deleted); it never makes state.
func (m credentialMemory) forget(key client.ObjectKey) {
	m.states.peek(key, func(s *planeState) {
		if s != nil {
			*m.slot(s) = credentialSeen{}
		}
	})
}
