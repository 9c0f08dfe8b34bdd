package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// platformOperator is a user bound to the platform roles config/default installs
// (config/rbac/platform_roles.yaml: abandon and shard) and able to edit ComputePlanes.
func platformOperator(t *testing.T, ctx context.Context, user string) client.Client {
	t.Helper()
	edit := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-plane-annotator"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{cpv1.GroupVersion.Group}, Resources: []string{"computeplanes"}, Verbs: []string{"get", "list", "patch", "update"}}}}
	if err := k8s.Create(ctx, edit); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"computeplane-abandon", "computeplane-shard", edit.Name} {
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-" + r},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		if err := k8s.Create(ctx, b); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(mgmt.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// annotate sets an annotation on the plane as c.
func annotate(ctx context.Context, c client.Client, p *cpv1.ComputePlane, key, value string) error {
	got := &cpv1.ComputePlane{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
		return err
	}
	patch := client.MergeFrom(got.DeepCopy())
	metav1.SetMetaDataAnnotation(&got.ObjectMeta, key, value)
	return c.Patch(ctx, got, patch)
}

// TestTeardownAbandonOnlyByPlatformOperator: a teardown stuck on what it cannot confirm
// (here Cluster API never finishes) waits visibly, with how long; a tenant cannot tell
// it to give up, a platform operator can, and the event says what was abandoned.
func TestTeardownAbandonOnlyByPlatformOperator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("abandon-"+rand.String(6)), withGroup("workers", medium))
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.ProvisionedCondition, metav1.ConditionFalse, "WaitingForInfrastructure"))
	cluster := &clusterv1.Cluster{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: infraOf(p), Name: "plane"}, cluster); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cluster.DeepCopy())
	controllerutil.AddFinalizer(cluster, clusterv1.ClusterFinalizer) // Cluster API, stuck
	if err := k8s.Patch(ctx, cluster, patch); err != nil {
		t.Fatal(err)
	}
	alice := tenantUser(t, ctx, p.Namespace, "alice")
	denied(t, annotate(ctx, alice, p, cpv1.AbandonAnnotation, "mine"), "setting computeplane.cozystack.io/abandon needs update on computeplanes/abandon")

	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		rec := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReconcilingCondition)
		if rec == nil || rec.Reason != cpv1.DeletingClusterReason || !strings.Contains(rec.Message, "(less than a minute so far)") ||
			!strings.Contains(rec.Message, cpv1.AbandonAnnotation) {
			return fmt.Errorf("Reconciling = %+v", rec)
		}
		if got.Status.Deletion == nil || got.Status.Deletion.Stage != cpv1.DeletingClusterReason {
			return fmt.Errorf("status.deletion = %+v", got.Status.Deletion)
		}
		return nil
	})
	denied(t, annotate(ctx, alice, p, cpv1.AbandonAnnotation, "mine"), "a platform operator's decision, not a tenant's")

	bob := platformOperator(t, ctx, "bob")
	eventually(t, settle, func() error {
		return annotate(ctx, bob, p, cpv1.AbandonAnnotation, "CAPI is broken on this cluster, ticket 42")
	})
	eventually(t, settle, planeGone(ctx, key))
	var evs corev1.EventList
	if err := k8s.List(ctx, &evs, client.InNamespace(p.Namespace)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs.Items {
		if e.Reason == "Abandoned" && strings.Contains(e.Message, "ticket 42") && strings.Contains(e.Message, "the Cluster") {
			found = true
		}
	}
	if !found {
		t.Error("no Abandoned event names what was left behind and why")
	}
}

// TestTeardownUninstallsFirstAndKeepsTheCredential: placement releases are deleted
// first, and while Flux has not uninstalled them the applier credential stays (even one
// the gate had already revoked is issued again), so Flux can; only then is it revoked.
// Flux's part is played by writing its status; the e2e suite runs the real one.
func TestTeardownUninstallsFirstAndKeepsTheCredential(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("uninstall-first-"+rand.String(6)), withGroup("workers", medium))
	key := client.ObjectKeyFromObject(p)
	hr := placementRelease(p.Namespace, "app")
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	hr.Status.StorageNamespace = p.Namespace // installed, as Flux records it
	if err := k8s.Status().Update(ctx, hr); err != nil {
		t.Fatal(err)
	}
	setWorkersMax(t, ctx, p, 99) // the gate closes: the credential is revoked
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}); err == nil {
			return errors.New("the credential outlived the open gate")
		}
		return nil
	})

	deleteWithReleases(t, ctx, p)
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		rec := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReconcilingCondition)
		if rec == nil || rec.Reason != cpv1.UninstallingPlacementReason || !strings.Contains(rec.Message, "(app)") {
			return fmt.Errorf("Reconciling = %+v", rec)
		}
		return nil
	})
	eventually(t, settle, func() error { return k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}) })
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil || hr.DeletionTimestamp.IsZero() {
		t.Fatalf("the placement release was not deleted first (err=%v)", err)
	}
	checkApplier(t, ctx, mustSecret(t, ctx, applierSecretKey(p)), p.Namespace)

	// Flux uninstalls; the release goes, then the credential and the rest.
	hr.Status.StorageNamespace = ""
	if err := k8s.Status().Update(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, releaseGone(ctx, hr))
	eventually(t, settle, planeGone(ctx, key))
	if err := k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}); err == nil {
		t.Error("the applier credential outlived the plane")
	}
}

// TestTeardownWhileTheNamespaceGoes: the tenant namespace being deleted cannot hold a
// credential any more, so waiting for Flux to uninstall would deadlock with it: the
// releases go at once, their objects with the plane.
func TestTeardownWhileTheNamespaceGoes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("nsgone-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	hr := placementRelease(p.Namespace, "app")
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	hr.Status.StorageNamespace = p.Namespace
	if err := k8s.Status().Update(ctx, hr); err != nil {
		t.Fatal(err)
	}
	// The plane's teardown is what is tested: it must have begun (a plane deleted before
	// the operator added its finalizer has none).
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(got, cpv1.ComputePlaneFinalizer) {
			return errors.New("the plane has no finalizer yet")
		}
		return nil
	})
	// envtest runs no namespace controller: the namespace stays Terminating and the test
	// deletes what it would.
	if err := k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, releaseGone(ctx, hr))
	eventually(t, settle, planeGone(ctx, key))
}

func mustSecret(t *testing.T, ctx context.Context, key client.ObjectKey) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8s.Get(ctx, key, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func setWorkersMax(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, n int32) {
	t.Helper()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	g := p.Spec.NodeGroups["workers"]
	g.MaxReplicas = n
	p.Spec.NodeGroups["workers"] = g
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
}
