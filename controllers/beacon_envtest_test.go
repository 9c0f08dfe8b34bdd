package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/computeplane"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// beacon checks the plane's namespace's capability label: want names the plane, or ""
// for none.
func beacon(ctx context.Context, namespace, want string) func() error {
	return func() error {
		ns := &corev1.Namespace{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
			return err
		}
		if got := ns.Labels[cpv1.DefaultCapabilityLabel]; got != want {
			return fmt.Errorf("%s=%q, want %q", cpv1.DefaultCapabilityLabel, got, want)
		}
		return nil
	}
}

// sinceReady is how long ago the plane's Ready condition last changed.
func sinceReady(t *testing.T, ctx context.Context, key client.ObjectKey) time.Duration {
	t.Helper()
	got := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	return time.Since(apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReadyCondition).LastTransitionTime.Time)
}

// TestCapabilityBeacon: the discovery beacon of the capabilities design. While the plane
// is Ready its namespace carries namespace.cozystack.io/capability.computeplane=<plane>;
// the label goes when the gate closes, comes back when it reopens, and goes with the
// plane.
func TestCapabilityBeacon(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("beacon-"+rand.String(6)), withGroup("workers", medium))
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, beacon(ctx, p.Namespace, p.Name))
	t.Logf("Ready → labelled within %s (the condition's second-granular transition time bounds it)", sinceReady(t, ctx, key))

	setWorkersMax(t, ctx, p, 99) // beyond the class: Valid=False, the gate closes
	eventually(t, settle, gateClosed(ctx, p))
	eventually(t, settle, beacon(ctx, p.Namespace, ""))
	t.Logf("closed → unlabelled within %s", sinceReady(t, ctx, key))

	setWorkersMax(t, ctx, p, 2)
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	eventually(t, settle, beacon(ctx, p.Namespace, p.Name))

	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, beacon(ctx, p.Namespace, ""))
	eventually(t, settle, planeGone(ctx, key))
}

// TestAttackOperatorRelabelsNamespaces: the operator holds patch and delete on every
// namespace (it cannot know its infrastructure namespaces' names in advance). Its token
// stolen, or a bug, must not relabel a tenant namespace (privileged Pod Security, another
// class's allowedNamespaces, another provider's capability) or delete one: the namespace
// guard lets it change only its own capability label of a namespace it did not create,
// to a plane's name, and delete only its own.
func TestAttackOperatorRelabelsNamespaces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op := asOperator(t)
	ns := tenantNamespace(t, ctx)
	label := func(key string, value any) error {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: value}}})
		return op.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch(types.MergePatchType, patch))
	}
	const onlyItsBeacon = "may change only its capability label " + cpv1.DefaultCapabilityLabel
	eventuallyDenied(t, func() error { return label("pod-security.kubernetes.io/enforce", "privileged") }, onlyItsBeacon)
	denied(t, label("tenant.example.com/class", "gold"), onlyItsBeacon)
	// Another capability (a consumer would send another provider's workloads here), or its
	// own with a value no plane could be named.
	denied(t, label(cpv1.CapabilityLabelPrefix+"gpu-cluster", "plane"), onlyItsBeacon)
	denied(t, label(cpv1.DefaultCapabilityLabel, "Not_A_Plane"), onlyItsBeacon)
	denied(t, op.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}), "deletes only the namespaces it created")
	if err := label(cpv1.DefaultCapabilityLabel, "plane"); err != nil {
		t.Fatalf("the beacon itself was refused: %v", err)
	}
	if err := label(cpv1.DefaultCapabilityLabel, nil); err != nil {
		t.Fatalf("taking the beacon away was refused: %v", err)
	}

	// Its own infrastructure namespaces (marked with a plane's UID) it labels and deletes.
	own := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cp-own-" + rand.String(6), Labels: map[string]string{cpv1.PlaneUIDLabel: "0000"}}}
	if err := k8s.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"pod-security.kubernetes.io/enforce": "privileged"}}})
	if err := op.Patch(ctx, own, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Errorf("labelling its own namespace was refused: %v", err)
	}
	if err := op.Delete(ctx, own); err != nil {
		t.Errorf("deleting its own namespace was refused: %v", err)
	}
}

func TestCheckCapabilityLabel(t *testing.T) {
	for key, ok := range map[string]bool{
		"": true, cpv1.DefaultCapabilityLabel: true, "namespace.cozystack.io/capability.gpu-plane": true,
		"namespace.cozystack.io/capability.": false, "example.com/capability.computeplane": false, "computeplane": false,
	} {
		if err := computeplane.CheckCapabilityLabel(key); (err == nil) != ok {
			t.Errorf("CheckCapabilityLabel(%q) = %v, want ok=%v", key, err, ok)
		}
	}
}
