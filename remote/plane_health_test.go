package remote_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/remote"
)

// TestHealthProbeWakesThePlane: a settled plane has no passes of its own, so the cache's
// probe is what finds its datastore gone under a live API server (which still answers
// /version, and whose watches stay open): the plane is woken, no longer settled, and its
// next Get says it is unreachable. While the plane answers, the probe wakes nothing.
func TestHealthProbeWakesThePlane(t *testing.T) {
	scheme := testScheme(t)
	tenant := tenantCluster(t, scheme)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pc, got, key, cred := connectedCache(t, ctx, scheme, tenant, 500*time.Millisecond)
	if _, ok := pc.SettledUntil(key); ok {
		t.Fatal("a plane never read in full counts as settled")
	}
	mark, watched := pc.Mark(key)
	if !watched {
		t.Fatal("the plane is not watched")
	}
	until := time.Now().Add(time.Hour)
	pc.Settled(key, mark, "want", until)
	if got, ok := pc.SettledUntil(key); !ok || !got.Equal(until) {
		t.Fatalf("SettledUntil = %v, %v; want %v, true", got, ok, until)
	}
	if n := got.drain(3 * time.Second); n != 0 {
		t.Fatalf("a plane that answers was woken %d times in 3 s", n)
	}

	if err := tenant.StopEtcd(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.StartEtcd() })
	got.expect(t, 10*time.Second, "after the plane's etcd stopped")
	if _, ok := pc.SettledUntil(key); ok {
		t.Error("a plane whose probe failed still counts as settled")
	}
	if _, err := pc.Get(ctx, key, cred); err == nil {
		t.Error("with etcd stopped the plane was reported reachable")
	}

	// Without HealthInterval nothing probes: a settled plane keeps its periodic passes.
	idle := &remote.ClusterCache{Scheme: scheme, Timeout: 2 * time.Second, ProbeInterval: 2 * time.Second, Grace: time.Hour}
	if _, ok := idle.SettledUntil(key); ok {
		t.Error("a cache that does not probe lets a plane go without passes")
	}
}

// TestWatchesComeBackAfterAnOutage: the plane's API server crashes and comes back; its
// watches resume (from the version they had seen, or by listing again, which wakes the
// plane), so a change made after it is reported. Their first lists, when the plane
// connected, woke nothing. The health probe is off: the watches alone must say it.
func TestWatchesComeBackAfterAnOutage(t *testing.T) {
	scheme := testScheme(t)
	tenant := tenantCluster(t, scheme)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	_, got, _, _ := connectedCache(t, ctx, scheme, tenant, 0)
	if n := got.drain(2 * time.Second); n != 0 {
		t.Fatalf("the watches' first lists woke the plane %d times", n)
	}

	if err := tenant.CrashAPIServer(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := tenant.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	create := func() error {
		return tenant.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "after-the-outage"}})
	}
	deadline := time.Now().Add(30 * time.Second)
	for err := create(); err != nil; err = create() {
		if time.Now().After(deadline) {
			t.Fatalf("the plane's API server did not come back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	got.expect(t, time.Minute, "for a namespace created after the plane's API server came back")
}

// connectedCache starts a plane cache (health probe every healthInterval; 0: none) that
// reports its wake-ups to the returned changes, and connects it to tenant as plane
// tenant-a/a.
func connectedCache(t *testing.T, ctx context.Context, scheme *runtime.Scheme, tenant *devenv.Cluster, healthInterval time.Duration) (*remote.ClusterCache, changes, types.NamespacedName, *remote.AdminCredential) {
	t.Helper()
	got := make(changes, 100)
	pc := &remote.ClusterCache{Scheme: scheme, Timeout: 2 * time.Second, ProbeInterval: 2 * time.Second, Grace: time.Hour,
		HealthInterval: healthInterval, OnChange: got.on}
	go func() { _ = pc.Start(ctx) }()
	key := types.NamespacedName{Namespace: "tenant-a", Name: "a"}
	cred := credential(t, tenant)
	if _, err := pc.Get(ctx, key, cred); err != nil {
		t.Fatal(err)
	}
	return pc, got, key, cred
}
