package remote_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/test/testenv"
)

// TestClusterCache: a client per plane from a Kamaji-shaped kubeconfig, the operator's
// identity read from its certificate, a rebuilt client when the kubeconfig rotates, and
// a dead plane reported at once, with the grace period marked.
func TestClusterCache(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	tenant, err := testenv.StartTenant(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	secret, err := testenv.AdminKubeconfigSecret(tenant, "cp-a", "a")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := secret.Data["super-admin.svc"]

	cache := &remote.ClusterCache{Scheme: scheme, Timeout: 2 * time.Second, ProbeInterval: time.Millisecond, Grace: 300 * time.Millisecond}
	key := types.NamespacedName{Namespace: "tenant-a", Name: "a"}
	ctx := context.Background()
	p, err := cache.Get(ctx, key, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if p.Identity != "kubernetes-super-admin" || p.Version == "" {
		t.Errorf("identity %q version %q", p.Identity, p.Version)
	}
	again, err := cache.Get(ctx, key, kubeconfig)
	if err != nil || again.Client != p.Client {
		t.Errorf("the same kubeconfig built a new client (err=%v)", err)
	}

	rotated, err := testenv.AdminKubeconfigSecret(tenant, "cp-a", "a")
	if err != nil {
		t.Fatal(err)
	}
	r, err := cache.Get(ctx, key, rotated.Data["super-admin.svc"])
	if err != nil || r.Client == p.Client {
		t.Errorf("a rotated kubeconfig kept the old client (err=%v)", err)
	}

	if _, err := cache.Get(ctx, key, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: https://x}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")); err == nil {
		t.Error("a token kubeconfig was accepted; the operator's identity would be unknown")
	}

	if err := tenant.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err = cache.Get(ctx, key, rotated.Data["super-admin.svc"])
	var unreachable *remote.UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Past {
		t.Fatalf("first failure: %v (want UnreachableError within the grace)", err)
	}
	time.Sleep(400 * time.Millisecond)
	_, err = cache.Get(ctx, key, rotated.Data["super-admin.svc"])
	if !errors.As(err, &unreachable) || !unreachable.Past {
		t.Fatalf("after the grace: %v (want UnreachableError past the grace)", err)
	}
}
