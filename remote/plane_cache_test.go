package remote_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/test/testenv"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// credential is the Kamaji-shaped admin credential of a tenant apiserver, as the
// operator accepts it.
func credential(t *testing.T, tenant *testenv.Cluster) *remote.AdminCredential {
	t.Helper()
	secret, err := testenv.AdminKubeconfigSecret(tenant, "cp-a", "a")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := remote.ParseAdminKubeconfig(secret.Data["super-admin.svc"], []string{tenant.Config.Host})
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// TestClusterCache: a client per plane from a Kamaji-shaped kubeconfig, the operator's
// identity read from its certificate, a rebuilt client when the credential rotates, and
// a dead plane reported at once, with the grace period marked.
func TestClusterCache(t *testing.T) {
	scheme := testScheme(t)
	tenant, err := testenv.StartTenant(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	cred := credential(t, tenant)

	cache := &remote.ClusterCache{Scheme: scheme, Timeout: 2 * time.Second, ProbeInterval: time.Millisecond, Grace: 300 * time.Millisecond}
	key := types.NamespacedName{Namespace: "tenant-a", Name: "a"}
	ctx := context.Background()
	p, err := cache.Get(ctx, key, cred)
	if err != nil {
		t.Fatal(err)
	}
	if p.Identity != "kubernetes-super-admin" || p.Version == "" {
		t.Errorf("identity %q version %q", p.Identity, p.Version)
	}
	again, err := cache.Get(ctx, key, cred)
	if err != nil || again.Client != p.Client {
		t.Errorf("the same credential built a new client (err=%v)", err)
	}
	rotated := credential(t, tenant)
	r, err := cache.Get(ctx, key, rotated)
	if err != nil || r.Client == p.Client {
		t.Errorf("a rotated credential kept the old client (err=%v)", err)
	}

	if err := tenant.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err = cache.Get(ctx, key, rotated)
	var unreachable *remote.UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Past {
		t.Fatalf("first failure: %v (want UnreachableError within the grace)", err)
	}
	time.Sleep(400 * time.Millisecond)
	_, err = cache.Get(ctx, key, rotated)
	if !errors.As(err, &unreachable) || !unreachable.Past {
		t.Fatalf("after the grace: %v (want UnreachableError past the grace)", err)
	}
	cache.Remove(key)
	if cache.Known(key) {
		t.Error("a removed plane is still known")
	}
}

// TestProbeNeedsStorage: an apiserver whose etcd is stopped still answers /version; the
// probe reads from storage, so the plane is reported unreachable, and reachable again
// once etcd is back.
func TestProbeNeedsStorage(t *testing.T) {
	scheme := testScheme(t)
	tenant, err := testenv.StartTenant(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	cred := credential(t, tenant)
	cache := &remote.ClusterCache{Scheme: scheme, Timeout: 2 * time.Second, ProbeInterval: time.Millisecond, Grace: time.Hour}
	key := types.NamespacedName{Namespace: "tenant-a", Name: "a"}
	ctx := context.Background()
	if _, err := cache.Get(ctx, key, cred); err != nil {
		t.Fatal(err)
	}

	if err := tenant.StopEtcd(); err != nil {
		t.Fatal(err)
	}
	disco := discovery.NewDiscoveryClientForConfigOrDie(cred.RESTConfig())
	if _, err := disco.ServerVersion(); err != nil {
		t.Fatalf("the apiserver does not answer /version with etcd stopped (the attack needs it to): %v", err)
	}
	var unreachable *remote.UnreachableError
	if _, err := cache.Get(ctx, key, cred); !errors.As(err, &unreachable) {
		t.Fatalf("with etcd stopped the plane was reported reachable (err=%v)", err)
	}

	if err := tenant.StartEtcd(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := cache.Get(ctx, key, cred)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd is back but the plane is still unreachable: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPlaneInformersAreScoped: a tenant's own RoleBindings in its plane are not cached
// by the operator (only what it labelled, and every namespace, are).
func TestPlaneInformersAreScoped(t *testing.T) {
	scheme := testScheme(t)
	tenant, err := testenv.StartTenant(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := tenant.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil {
		t.Fatal(err)
	}
	mine := map[string]string{"app.kubernetes.io/managed-by": "computeplane-operator"}
	for i := range 20 {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: fmt.Sprintf("tenant-%d", i)},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "r"}}
		if i == 0 {
			rb.Name, rb.Labels = "operator", mine
		}
		if err := c.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
	}

	got := make(chan cache.Cache, 1)
	pc := &remote.ClusterCache{Scheme: scheme, Timeout: 2 * time.Second, ProbeInterval: time.Second, Grace: time.Second,
		WatchSelector: labels.SelectorFromSet(mine),
		OnConnect:     func(_ types.NamespacedName, c cache.Cache) error { got <- c; return nil }}
	managerCtx, stopManager := context.WithCancel(ctx)
	defer stopManager()
	stopped := make(chan struct{})
	go func() { _ = pc.Start(managerCtx); close(stopped) }()
	key := types.NamespacedName{Namespace: "tenant-a", Name: "a"}
	if _, err := pc.Get(ctx, key, credential(t, tenant)); err != nil {
		t.Fatal(err)
	}
	informers := <-got
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("the plane's informers did not start")
	}
	var rbs rbacv1.RoleBindingList
	if err := informers.List(ctx, &rbs); err != nil {
		t.Fatal(err)
	}
	if len(rbs.Items) != 1 || rbs.Items[0].Name != "operator" {
		t.Errorf("the plane's RoleBinding informer holds %d objects, want only the operator's", len(rbs.Items))
	}
	var nss corev1.NamespaceList
	if err := informers.List(ctx, &nss); err != nil {
		t.Fatal(err)
	}
	if len(nss.Items) < 2 {
		t.Errorf("namespaces are not all watched: %d", len(nss.Items))
	}

	// The plane's informers live under the manager's context: they stop with it.
	stopManager()
	<-stopped
	for _, conn := range pc.Connections() {
		if conn.Watching {
			t.Error("the plane is still watched after the manager stopped")
		}
	}
}

// TestPlaneWatchesOutliveTheTimeout: the request timeout bounds the operator's requests
// to a plane, not its watches: a plane's informers keep one watch open past it (they
// neither reopen it every Timeout nor miss what happens meanwhile).
func TestPlaneWatchesOutliveTheTimeout(t *testing.T) {
	scheme := testScheme(t)
	tenant, err := testenv.StartTenantWith(scheme, testenv.TenantOptions{Audit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	got := make(chan cache.Cache, 1)
	pc := &remote.ClusterCache{Scheme: scheme, Timeout: time.Second, ProbeInterval: time.Second, Grace: 10 * time.Second,
		OnConnect: func(_ types.NamespacedName, c cache.Cache) error {
			if _, err := c.GetInformer(ctx, &corev1.Namespace{}); err != nil {
				return err
			}
			got <- c
			return nil
		}}
	go func() { _ = pc.Start(ctx) }()
	if _, err := pc.Get(ctx, types.NamespacedName{Namespace: "tenant-a", Name: "a"}, credential(t, tenant)); err != nil {
		t.Fatal(err)
	}
	informers := <-got
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("the plane's informers did not start")
	}
	time.Sleep(4 * time.Second)
	if err := tenant.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "later"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		return informers.Get(ctx, types.NamespacedName{Name: "later"}, &corev1.Namespace{})
	})
	events, err := testenv.ReadAudit(tenant.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	watches := 0
	for _, ev := range events {
		if ev.Verb == "watch" && ev.Stage == "ResponseStarted" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "namespaces" {
			watches++
		}
	}
	if watches != 1 {
		t.Errorf("the namespace informer opened %d watches in 5 s with a 1 s request timeout, want 1", watches)
	}
}
