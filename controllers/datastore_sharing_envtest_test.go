package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/test/testkit"
)

// TestAttackNeighbourOnADedicatedDataStore: planes of a class share its Kamaji
// DataStore, so one tenant's charts filling it stop every plane on it. The class gives
// one tenant a DataStore of its own (spec.controlPlane.dataStores, by namespace name):
// that tenant's plane is rendered onto it, a neighbour's plane of the same class is not
// (it stays on the class's dataStoreName), and relabelling the namespaces afterwards
// moves neither plane (a DataStore never changes under a running plane).
func TestAttackNeighbourOnADedicatedDataStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	own := "own-" + rand.String(6)
	class := newClass("datastores-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.ControlPlane.DataStoreName = "shared"
		c.Spec.ControlPlane.DataStores = []cpv1.DataStoreAssignment{{Name: own,
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": own}}}}
	})
	if err := k8s.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	tenant, neighbour := tenantNamespace(t, ctx), tenantNamespace(t, ctx)
	label(t, ctx, tenant, own)
	planes := map[string]*cpv1.ComputePlane{tenant: newPlane(tenant, "plane", class.Name), neighbour: newPlane(neighbour, "plane", class.Name)}
	for _, p := range planes {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{tenant: own, neighbour: "shared"}
	check := func() {
		t.Helper()
		for ns, p := range planes {
			testkit.Poll(t, 30*time.Second, 50*time.Millisecond, func() error {
				return dataStoreIs(ctx, p, want[ns])
			})
		}
	}
	check()
	// The tenant's label goes, the neighbour gets it: neither plane moves.
	label(t, ctx, tenant, "")
	label(t, ctx, neighbour, own)
	for _, p := range planes {
		requestReconcile(t, ctx, p, "relabelled")
	}
	testkit.Poll(t, 30*time.Second, 50*time.Millisecond, func() error {
		for _, p := range planes {
			got := &cpv1.ComputePlane{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
				return err
			}
			if got.Status.LastHandledReconcileAt != "relabelled" {
				return fmt.Errorf("%s has not handled the request", p.Namespace)
			}
		}
		return nil
	})
	check()
}

// label sets (value) or removes (empty) the "tier" label of a namespace, as a platform
// operator would.
func label(t *testing.T, ctx context.Context, name, value string) {
	t.Helper()
	ns := &corev1.Namespace{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ns.DeepCopy())
	if value == "" {
		delete(ns.Labels, "tier")
	} else {
		metav1.SetMetaDataLabel(&ns.ObjectMeta, "tier", value)
	}
	if err := k8s.Patch(ctx, ns, patch); err != nil {
		t.Fatal(err)
	}
}

// dataStoreIs checks the DataStore a plane records and its KamajiControlPlane names.
func dataStoreIs(ctx context.Context, p *cpv1.ComputePlane, want string) error {
	got := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
		return err
	}
	if got.Status.DataStoreName != want {
		return fmt.Errorf("plane %s records DataStore %q, want %q", p.Namespace, got.Status.DataStoreName, want)
	}
	kcp := kamajiControlPlane()
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: infraOf(got), Name: render.ClusterName(got)}, kcp); err != nil {
		return err
	}
	if ds, _, _ := unstructured.NestedString(kcp.Object, "spec", "dataStoreName"); ds != want {
		return fmt.Errorf("plane %s's KamajiControlPlane names DataStore %q, want %q", p.Namespace, ds, want)
	}
	return nil
}
