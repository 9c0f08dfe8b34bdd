package placement

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/cozystack/computeplane/controllers/tenancy"
)

// CredentialCopyPath is where the Secret webhook (config/webhook/placement.yaml) is served.
const CredentialCopyPath = "/validate-credential-copy"

// maxConcurrentJudges bounds the Secrets judged at once: a YAML parse of a 1 MiB value
// costs tens of MiB, and a tenant may write many at once; the rest wait their turn
// within the request's timeout.
const maxConcurrentJudges = 2

// CopyGuard refuses a Secret, written by anyone but the operator, that carries a
// plane's token (tenancy.PlaneCredentialIn): the judging of content that makes "only a
// placement release applies into a plane" hold whatever Secret a Flux object names. It
// also refuses a kubeconfig that names a file or a program of the controller that
// would load it (controllerFilesIn): a tenant's kubeconfig must not make Flux send its
// own credential anywhere.
type CopyGuard struct {
	// Client asks the API server who the operator is (once).
	Client client.Client
	// IsPlaneSubject says whether a token's subject is an identity the operator issues
	// plane tokens to (the applier's, the autoscaler's).
	IsPlaneSubject func(string) bool

	mu       sync.Mutex
	operator string
	judges   chan struct{}
}

// SetupWithManager registers the webhook with the manager's webhook server.
func (g *CopyGuard) SetupWithManager(srv webhook.Server) {
	g.judges = make(chan struct{}, maxConcurrentJudges)
	srv.Register(CredentialCopyPath, &webhook.Admission{Handler: admission.HandlerFunc(g.validate)})
}

func (g *CopyGuard) validate(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	me, err := g.operatorName(ctx)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if req.UserInfo.Username == me {
		return admission.Allowed("") // the operator's own applier Secret
	}
	var secret, old corev1.Secret
	if err := json.Unmarshal(req.Object.Raw, &secret); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if secret.DeletionTimestamp != nil {
		return admission.Allowed("")
	}
	if req.Operation == admissionv1.Update {
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if maps.EqualFunc(old.Data, secret.Data, bytes.Equal) {
			// Metadata only (labels, the garbage collector's ownerReferences): the content
			// was judged when it was written.
			return admission.Allowed("")
		}
	}
	select {
	case g.judges <- struct{}{}:
		defer func() { <-g.judges }()
	case <-ctx.Done():
		return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("too many Secrets judged at once; try again"))
	}
	if c, ok := tenancy.PlaneCredentialIn(secret.Data, g.IsPlaneSubject); ok {
		return admission.Denied(tenancy.CredentialCopyMessage(req.Namespace, req.Name, c))
	}
	if key, field, ok := controllerFilesIn(secret.Data); ok {
		return admission.Denied(controllerFilesMessage(req.Namespace, req.Name, key, field))
	}
	return admission.Allowed("")
}

// operatorName asks the API server who the operator is (a SelfSubjectReview), once.
func (g *CopyGuard) operatorName(ctx context.Context) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.operator != "" {
		return g.operator, nil
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := g.Client.Create(ctx, review); err != nil {
		return "", fmt.Errorf("asking the apiserver who the operator is: %w", err)
	}
	if strings.TrimSpace(review.Status.UserInfo.Username) == "" {
		return "", fmt.Errorf("the apiserver names the operator no user")
	}
	g.operator = review.Status.UserInfo.Username
	return g.operator, nil
}
