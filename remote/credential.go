package remote

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApplierToken is a short-lived token of the applier ServiceAccount.
type ApplierToken struct {
	Token     string
	ExpiresAt time.Time
	// ServiceAccountUID is the UID the token is bound to: a recreated ServiceAccount
	// invalidates it.
	ServiceAccountUID string
}

// IssueApplierToken asks the plane's TokenRequest API for a token of the applier with
// a bounded lifetime.
func IssueApplierToken(ctx context.Context, c client.Client, lifetime time.Duration) (*ApplierToken, error) {
	sa := &corev1.ServiceAccount{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ApplierNamespace, Name: ApplierName}, sa); err != nil {
		return nil, err
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(lifetime.Seconds())),
	}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("requesting a token for %s/%s: %w", ApplierNamespace, ApplierName, err)
	}
	return &ApplierToken{Token: tr.Status.Token, ExpiresAt: tr.Status.ExpirationTimestamp.Time, ServiceAccountUID: string(sa.UID)}, nil
}

// ApplierKubeconfig is a kubeconfig for the applier: the plane's server and CA taken
// from the admin kubeconfig (its in-cluster .svc address, which Flux reaches), the
// applier's token as the only credential.
func ApplierKubeconfig(adminKubeconfig []byte, token string) ([]byte, error) {
	admin, err := clientcmd.Load(adminKubeconfig)
	if err != nil {
		return nil, err
	}
	ctxName := admin.CurrentContext
	kctx := admin.Contexts[ctxName]
	if kctx == nil {
		return nil, fmt.Errorf("the admin kubeconfig has no current context")
	}
	cluster := admin.Clusters[kctx.Cluster]
	if cluster == nil {
		return nil, fmt.Errorf("the admin kubeconfig's context names no cluster")
	}
	out := clientcmdapi.NewConfig()
	out.Clusters["plane"] = &clientcmdapi.Cluster{Server: cluster.Server, CertificateAuthorityData: cluster.CertificateAuthorityData}
	out.AuthInfos[ApplierName] = &clientcmdapi.AuthInfo{Token: token}
	out.Contexts[ApplierName+"@plane"] = &clientcmdapi.Context{Cluster: "plane", AuthInfo: ApplierName}
	out.CurrentContext = ApplierName + "@plane"
	return clientcmd.Write(*out)
}
