package remote_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/remote"
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
func credential(t *testing.T, tenant *devenv.Cluster) *remote.AdminCredential {
	t.Helper()
	secret, err := devenv.AdminKubeconfigSecret(tenant, "cp-a", "a")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := remote.ParseAdminKubeconfig(secret.Data["super-admin.svc"], []string{tenant.Config.Host})
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// TestClusterCache: a connection per plane from a Kamaji-shaped kubeconfig, the operator's
// identity read from its certificate, a new connection when the credential rotates, and
// a dead plane reported at once, with the grace period marked.
func TestClusterCache(t *testing.T) {
	scheme := testScheme(t)
	tenant := tenantCluster(t, scheme)
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
	// The credential lives in the transports only; clients built later still use it.
	if n := remote.KeptCredentialBytes(p); n != 0 {
		t.Errorf("the connection keeps %d bytes of the credential's key and certificates beside its transports", n)
	}
	later, err := cache.Get(ctx, key, cred)
	if err != nil {
		t.Fatal(err)
	}
	if err := later.Client.Get(ctx, types.NamespacedName{Name: "kube-system"}, &corev1.Namespace{}); err != nil {
		t.Errorf("a client built after the connection reads nothing: %v", err)
	}
	canary, err := later.Canary()
	if err != nil {
		t.Fatal(err)
	}
	if err := canary.Get(ctx, types.NamespacedName{Name: "kube-system"}, &corev1.Namespace{}); err != nil {
		t.Errorf("a canary built after the connection reads nothing: %v", err)
	}
	again, err := cache.Get(ctx, key, cred)
	if err != nil || !remote.SameConnection(again, p) {
		t.Errorf("the same credential built a new connection (err=%v)", err)
	}
	rotated := credential(t, tenant)
	r, err := cache.Get(ctx, key, rotated)
	if err != nil || remote.SameConnection(r, p) {
		t.Errorf("a rotated credential kept the old connection (err=%v)", err)
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
	tenant := tenantCluster(t, scheme)
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
	cfg, err := cred.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	disco := discovery.NewDiscoveryClientForConfigOrDie(cfg)
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

// tenantCluster is a plane apiserver, stopped with the test.
func tenantCluster(t *testing.T, scheme *runtime.Scheme) *devenv.Cluster {
	t.Helper()
	tenant, err := devenv.StartTenant(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	return tenant
}

// auditedTenant is a plane apiserver that audits every request, stopped with the test.
func auditedTenant(t *testing.T, scheme *runtime.Scheme) *devenv.Cluster {
	t.Helper()
	tenant, err := devenv.StartTenantWith(scheme, devenv.TenantOptions{Audit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	return tenant
}

// changes collects a ClusterCache's OnChange calls.
type changes chan types.NamespacedName

func (ch changes) on(key types.NamespacedName) {
	select {
	case ch <- key:
	default: // a full channel already says "changed"
	}
}

// drain waits until no change came for quiet.
func (ch changes) drain(quiet time.Duration) int {
	n := 0
	for {
		select {
		case <-ch:
			n++
		case <-time.After(quiet):
			return n
		}
	}
}

// expect waits for a change; none within d is an error.
func (ch changes) expect(t *testing.T, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
		ch.drain(300 * time.Millisecond)
	case <-time.After(d):
		t.Errorf("no change reported %s", what)
	}
}

// TestPlaneWatchesAreScoped: a plane's watches tell the operator at once when what it
// labelled changes, or any namespace; a tenant's own policy bindings in its plane do not
// wake it (nor are they sent to it: the watches ask for the operator's labels), the
// watches read metadata only, and they stop with the manager.
func TestPlaneWatchesAreScoped(t *testing.T) {
	scheme := testScheme(t)
	tenant := auditedTenant(t, scheme)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := tenant.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil {
		t.Fatal(err)
	}
	mine := map[string]string{"app.kubernetes.io/managed-by": "computeplane-operator"}
	binding := func(name string, l map[string]string) *admissionv1.ValidatingAdmissionPolicyBinding {
		return &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
			Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "p", ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}
	}

	got := make(changes, 100)
	pc := &remote.ClusterCache{Scheme: scheme, Timeout: 2 * time.Second, ProbeInterval: time.Second, Grace: time.Second,
		WatchSelector: labels.SelectorFromSet(mine), OnChange: got.on}
	managerCtx, stopManager := context.WithCancel(ctx)
	defer stopManager()
	stopped := make(chan struct{})
	go func() { _ = pc.Start(managerCtx); close(stopped) }()
	key := types.NamespacedName{Namespace: "tenant-a", Name: "a"}
	cred := credential(t, tenant)
	if _, err := pc.Get(ctx, key, cred); err != nil {
		t.Fatal(err)
	}
	// Get waited for each kind's first list: a full read marked now is after all of
	// them (they count as changes, but wake nothing: the caller reads the plane next).
	if mark, ok := pc.Mark(key); !ok || mark != uint64(len(remote.WatchedResources)) {
		t.Errorf("Mark after the first Get = %d, %v; want one change per watched kind (%d), watched", mark, ok, len(remote.WatchedResources))
	}
	if n := got.drain(2 * time.Second); n != 0 {
		t.Errorf("%d changes reported when the watches started, want none (Get waits for their lists)", n)
	}

	if err := c.Create(ctx, binding("tenant", nil)); err != nil {
		t.Fatal(err)
	}
	if n := got.drain(2 * time.Second); n != 0 {
		t.Errorf("a tenant's own policy binding reported %d changes, want none", n)
	}
	if err := c.Create(ctx, binding("operator", mine)); err != nil {
		t.Fatal(err)
	}
	got.expect(t, 10*time.Second, "when an operator-labelled policy binding was created")
	if err := c.Delete(ctx, binding("operator", mine)); err != nil {
		t.Fatal(err)
	}
	got.expect(t, 10*time.Second, "when an operator-labelled policy binding was deleted")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "new"}}); err != nil {
		t.Fatal(err)
	}
	got.expect(t, 10*time.Second, "when a namespace was created")

	events, err := devenv.ReadAudit(tenant.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	watched := map[string]bool{}
	for _, ev := range events {
		if ev.User.Username != cred.Identity || ev.Stage != "ResponseComplete" && ev.Stage != "ResponseStarted" || ev.ObjectRef == nil {
			continue
		}
		res, uri := ev.ObjectRef.Resource, ev.RequestURI
		if ev.Verb == "watch" || ev.Verb == "list" {
			scoped := strings.Contains(uri, "labelSelector=")
			// What the operator never labels (namespaces, anyone's mutating policies)
			// is watched in full.
			whole := res == "namespaces" || strings.HasPrefix(res, "mutatingadmissionpolic")
			if scoped == whole {
				t.Errorf("%s %s: want a label selector on every kind but namespaces and mutating policies", ev.Verb, uri)
			}
		}
		if ev.Verb == "watch" {
			watched[res] = true
		}
		if ev.Verb == "list" && !strings.Contains(uri, "limit=1") {
			t.Errorf("list %s: the watches list one item (the version), not the collection", uri)
		}
	}
	for _, gvr := range remote.WatchedResources {
		if !watched[gvr.Resource] {
			t.Errorf("no watch on %s", gvr.Resource)
		}
	}

	// The plane's watches live under the manager's context: they stop with it.
	stopManager()
	<-stopped
	for _, conn := range pc.Connections() {
		if conn.Watching {
			t.Error("the plane is still watched after the manager stopped")
		}
	}
}

// TestPlaneWatchesOutliveTheTimeout: the request timeout bounds the operator's requests
// to a plane, not its watches: each watch stays open past it (it is neither reopened
// every Timeout nor misses what happens meanwhile).
func TestPlaneWatchesOutliveTheTimeout(t *testing.T) {
	scheme := testScheme(t)
	tenant := auditedTenant(t, scheme)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	got := make(changes, 100)
	pc := &remote.ClusterCache{Scheme: scheme, Timeout: time.Second, ProbeInterval: time.Second, Grace: 10 * time.Second,
		OnChange: got.on}
	go func() { _ = pc.Start(ctx) }()
	if _, err := pc.Get(ctx, types.NamespacedName{Namespace: "tenant-a", Name: "a"}, credential(t, tenant)); err != nil {
		t.Fatal(err)
	}
	got.drain(time.Second)
	time.Sleep(4 * time.Second)
	if err := tenant.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "later"}}); err != nil {
		t.Fatal(err)
	}
	got.expect(t, 10*time.Second, "for a namespace created 5 s after the watches started")
	events, err := devenv.ReadAudit(tenant.AuditLog)
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
		t.Errorf("the namespace watch was opened %d times in 5 s with a 1 s request timeout, want 1", watches)
	}
}
