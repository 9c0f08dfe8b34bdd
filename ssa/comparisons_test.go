package ssa_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/ssa"
)

// TestComparisonsRememberOnlyWhatTheyCompared: on a real API server, a remembered
// match is reused only for the same object (uid), the same version of it
// (resourceVersion), the same want and the same exact fields. Someone changing the
// object (keeping the operator's annotation, as `kubectl edit` does), deleting and
// recreating it, the operator wanting something else, or a stricter comparison, each
// compares in full and sees the difference.
func TestComparisonsRememberOnlyWhatTheyCompared(t *testing.T) {
	c := tenantClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "posture"}, Data: data}
	}
	m := &ssa.Comparisons{}
	if res, err := m.Apply(ctx, c, want(map[string]string{"a": "1"}), "test"); err != nil || res != ssa.Created {
		t.Fatalf("apply: %v, %v", res, err)
	}
	step := func(name string, got func() (bool, error), wantMatch bool, wantFull int) {
		t.Helper()
		before := ssa.FullComparisons(m)
		ok, err := got()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ok != wantMatch || ssa.FullComparisons(m)-before != wantFull {
			t.Errorf("%s: matched %v after %d full comparisons; want %v after %d", name, ok, ssa.FullComparisons(m)-before, wantMatch, wantFull)
		}
	}
	verify := func(data map[string]string, exact ...string) func() (bool, error) {
		return func() (bool, error) { return m.Verify(ctx, c, want(data), exact...) }
	}
	edit := func(mut func(*corev1.ConfigMap)) {
		t.Helper()
		live := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "posture"}, live); err != nil {
			t.Fatal(err)
		}
		mut(live)
		if err := c.Update(ctx, live); err != nil {
			t.Fatal(err)
		}
	}
	a1 := map[string]string{"a": "1"}
	step("first look", verify(a1), true, 1)
	step("same version, same want", verify(a1), true, 0)

	edit(func(cm *corev1.ConfigMap) { cm.Data["a"] = "2" })
	step("changed by someone", verify(a1), false, 1)
	if res, err := m.Apply(ctx, c, want(a1), "test"); err != nil || res != ssa.Restored {
		t.Fatalf("repair: %v, %v", res, err)
	}
	step("restored", verify(a1), true, 1)
	step("the operator wants something else", verify(map[string]string{"a": "3"}), false, 1)

	edit(func(cm *corev1.ConfigMap) { cm.Data["b"] = "added" })
	step("a key added", verify(a1), true, 1)
	step("a key added, compared exactly", verify(a1, "data"), false, 1)

	live := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "posture"}, live); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, live); err != nil {
		t.Fatal(err)
	}
	step("deleted", verify(a1), false, 0)
	if err := c.Create(ctx, want(map[string]string{"a": "2"})); err != nil {
		t.Fatal(err)
	}
	step("recreated by someone else, different", verify(a1), false, 1)
}

// contentless reads ConfigMaps as the manager's cache holds its contentless kinds: their
// identity alone.
type contentless struct{ client.Client }

func (c contentless) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		*cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID,
			ResourceVersion: cm.ResourceVersion, Labels: cm.Labels}}
	}
	return nil
}

// counting counts the reads made through it.
type counting struct {
	client.Reader
	gets int
}

func (c *counting) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestComparisonsOfContentlessKinds: a kind cached as its identity alone is compared
// with what the API server holds whenever its version is not remembered, and costs no
// read while it is.
func TestComparisonsOfContentlessKinds(t *testing.T) {
	c := tenantClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cached := contentless{c}
	want := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "trimmed"}, Data: data}
	}
	a1 := map[string]string{"a": "1"}
	fresh := &counting{Reader: c}
	trimmed := map[schema.GroupVersionKind]bool{corev1.SchemeGroupVersion.WithKind("ConfigMap"): true}
	m := &ssa.Comparisons{Fresh: fresh, Trimmed: trimmed}
	if res, err := m.Apply(ctx, cached, want(a1), "test"); err != nil || res != ssa.Created {
		t.Fatalf("apply: %v, %v", res, err)
	}
	step := func(name string, data map[string]string, wantMatch bool, wantReads int) {
		t.Helper()
		before := fresh.gets
		ok, err := m.Verify(ctx, cached, want(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ok != wantMatch || fresh.gets-before != wantReads {
			t.Errorf("%s: matched %v after %d reads from the API server; want %v after %d", name, ok, fresh.gets-before, wantMatch, wantReads)
		}
	}
	step("first look: read in full", a1, true, 1)
	step("same version: nothing read", a1, true, 0)
	live := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "trimmed"}, live); err != nil {
		t.Fatal(err)
	}
	live.Data["a"] = "2"
	if err := c.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	step("changed by someone: read in full, found changed", a1, false, 1)
	if res, err := m.Apply(ctx, cached, want(a1), "test"); err != nil || res != ssa.Restored {
		t.Fatalf("repair: %v, %v (a restore must be told from a foreign edit by the full object's annotation)", res, err)
	}
	step("restored", a1, true, 1)
	step("restored, at rest", a1, true, 0)

	// The identity alone never matches a want: without reading in full, every pass
	// would apply again.
	if ok, err := (&ssa.Comparisons{}).Verify(ctx, cached, want(a1)); err != nil || ok {
		t.Fatalf("an identity alone matched the want (%v, %v)", ok, err)
	}
	if _, err := (&ssa.Comparisons{Trimmed: trimmed}).Verify(ctx, cached, want(a1)); err == nil {
		t.Fatal("a contentless kind was compared with nowhere to read it in full")
	}
}

// tenantClient is a client of a tenant apiserver of the test's own.
func tenantClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cluster, err := devenv.StartTenant(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	c, err := client.New(cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
