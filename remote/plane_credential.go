package remote

import (
	"context"
	"fmt"
	"slices"
	"time"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"

	"github.com/cozystack/computeplane/remote/posture"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApplierToken is a short-lived token of a ServiceAccount of the plane (the applier's,
// or the cluster-autoscaler's).
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
	return IssueToken(ctx, c, client.ObjectKey{Namespace: posture.ApplierNamespace, Name: posture.ApplierName}, lifetime)
}

// IssueToken asks the plane's TokenRequest API for a token of the ServiceAccount
// account with a bounded lifetime.
func IssueToken(ctx context.Context, c client.Client, account client.ObjectKey, lifetime time.Duration) (*ApplierToken, error) {
	sa := &corev1.ServiceAccount{}
	if err := c.Get(ctx, account, sa); err != nil {
		return nil, err
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(lifetime.Seconds())),
	}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("requesting a token for %s: %w", account, err)
	}
	return &ApplierToken{Token: tr.Status.Token, ExpiresAt: tr.Status.ExpirationTimestamp.Time, ServiceAccountUID: string(sa.UID)}, nil
}

// ApplierKubeconfig is a kubeconfig for the applier: the plane's server and CA taken
// from the verified admin credential (its in-cluster .svc address, which Flux reaches),
// the applier's token as the only credential.
func ApplierKubeconfig(admin *AdminCredential, token string) ([]byte, error) {
	return TokenKubeconfig(admin, posture.ApplierName, token)
}

// TokenKubeconfig is a kubeconfig for user: the plane's server and CA taken from the
// verified admin credential (its in-cluster .svc address, which the management
// cluster's pods reach), token as the only credential.
func TokenKubeconfig(admin *AdminCredential, user, token string) ([]byte, error) {
	m, err := admin.material()
	if err != nil {
		return nil, err
	}
	out := clientcmdapi.NewConfig()
	out.Clusters["plane"] = &clientcmdapi.Cluster{Server: admin.Server, CertificateAuthorityData: m.ca}
	out.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	out.Contexts[user+"@plane"] = &clientcmdapi.Context{Cluster: "plane", AuthInfo: user}
	out.CurrentContext = user + "@plane"
	return clientcmd.Write(*out)
}

// RevokeApplier takes the applier's and the deployers' standing in the plane away, in
// the order that stops writes soonest. First the applier's impersonation bindings: the
// applier may do nothing but impersonate a deployer, so its writes stop as soon as the
// plane's apiserver's RBAC cache sees them gone (milliseconds; the burst test measures
// it). Then the applier ServiceAccount: a bound token names its ServiceAccount's UID,
// which a recreated account does not have, so no token ever issued for it authenticates
// again once the apiserver's token cache forgets it (kube-apiserver caches a successful
// token authentication for 10 s, TokenSuccessCacheTTL in
// k8s.io/kubernetes/pkg/kubeapiserver/options/authentication.go, not a flag: the
// ServiceAccount's deletion alone is not the cut). Then the deployers' ServiceAccounts,
// so a token requested for a deployer while the gate was open (by a plane admin, say)
// dies the same way. A copied token is then worthless whether or not the applier Secret
// still exists. The identities stage recreates them all (new UIDs) when the gate
// reopens; Flux impersonates the deployer by name, and its RoleBindings name it, so
// placement works again at once. It touches only objects carrying labels (the plane's),
// reads before it deletes (a revoked plane costs no write) and returns what it removed.
func RevokeApplier(ctx context.Context, c client.Client, deployerNamespaces []string, labels map[string]string) ([]string, error) {
	return DeleteOwned(ctx, c, revokedObjects(deployerNamespaces), labels)
}

// revokedObjects are what RevokeApplier removes, in its order: the applier's
// impersonation bindings, the applier, the deployers.
func revokedObjects(deployerNamespaces []string) []client.Object {
	sa := func(ns, name string) client.Object {
		o := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		o.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccount"))
		return o
	}
	namespaces := slices.Sorted(slices.Values(deployerNamespaces))
	var objs []client.Object
	for _, ns := range namespaces {
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: posture.ApplierName}}
		binding.SetGroupVersionKind(rbacv1.SchemeGroupVersion.WithKind("RoleBinding"))
		objs = append(objs, binding)
	}
	objs = append(objs, sa(posture.ApplierNamespace, posture.ApplierName))
	for _, ns := range namespaces {
		objs = append(objs, sa(ns, cpv1.DeployerName))
	}
	return objs
}

// DeleteOwned deletes those of objs that exist and carry labels (the plane's: nothing
// the operator did not create is ever deleted), reading before it deletes, and returns
// what it deleted. It does not wait for them to go.
func DeleteOwned(ctx context.Context, c client.Client, objs []client.Object, labels map[string]string) ([]string, error) {
	var deleted []string
	for _, o := range objs {
		live := o.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return deleted, err
		}
		if !posture.HasLabels(live.GetLabels(), labels) || live.GetDeletionTimestamp() != nil {
			continue
		}
		if err := client.IgnoreNotFound(c.Delete(ctx, live, client.Preconditions{UID: ptr.To(live.GetUID())})); err != nil {
			return deleted, err
		}
		deleted = append(deleted, describe(o))
	}
	return deleted, nil
}

// UnbindDeployer deletes the deployer's Roles and RoleBindings (those carrying labels,
// the plane's) from every namespace that is no longer a target: a namespace taken out
// of the spec keeps its objects and workloads, but placement releases may no longer
// write there. It returns what it removed.
func UnbindDeployer(ctx context.Context, c client.Client, targetNamespaces []string, labels map[string]string) ([]string, error) {
	keep := map[string]bool{}
	for _, ns := range targetNamespaces {
		keep[ns] = true
	}
	var roles rbacv1.RoleList
	if err := c.List(ctx, &roles, client.MatchingLabels(labels)); err != nil {
		return nil, err
	}
	var bindings rbacv1.RoleBindingList
	if err := c.List(ctx, &bindings, client.MatchingLabels(labels)); err != nil {
		return nil, err
	}
	var stale []client.Object
	for i := range bindings.Items {
		stale = append(stale, &bindings.Items[i]) // the bindings first: they grant
	}
	for i := range roles.Items {
		stale = append(stale, &roles.Items[i])
	}
	var removed []string
	for _, o := range stale {
		if o.GetName() != cpv1.DeployerName || keep[o.GetNamespace()] || o.GetDeletionTimestamp() != nil {
			continue
		}
		if err := client.IgnoreNotFound(c.Delete(ctx, o, client.Preconditions{UID: ptr.To(o.GetUID())})); err != nil {
			return removed, err
		}
		kind := "Role"
		if _, ok := o.(*rbacv1.RoleBinding); ok {
			kind = "RoleBinding"
		}
		removed = append(removed, kind+" "+o.GetNamespace()+"/"+o.GetName())
	}
	return removed, nil
}
