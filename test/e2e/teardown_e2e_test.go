package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/tenancy"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/testkit"
)

// stages records every teardown stage (Reconciling's reason) the plane shows until it is
// gone, and calls at(stage) the first time each appears.
func stages(ctx context.Context, key client.ObjectKey, at func(stage string)) func() error {
	var seen []string
	return func() error {
		p := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, p); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		if rec := apimeta.FindStatusCondition(p.Status.Conditions, cpv1.ReconcilingCondition); rec != nil &&
			(len(seen) == 0 || seen[len(seen)-1] != rec.Reason) && rec.Reason != cpv1.DeletingReason {
			seen = append(seen, rec.Reason)
			if at != nil {
				at(rec.Reason)
			}
		}
		return fmt.Errorf("plane still there, stages seen: %v", seen)
	}
}

// TestTeardownInOrder deletes a plane with placement releases installed by the real Flux
// and checks the order (releases uninstalled from the plane while the credential works,
// then identities and placement namespaces, egress policies, the Cluster), restarting
// the operator at every stage it is seen waiting on, and that nothing of the operator's is
// left on either side.
func TestTeardownInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	eventually(t, settle, planeReady(ctx, p))
	plane := planeClient(t, ctx, p)
	key := client.ObjectKeyFromObject(p)
	for _, hr := range []*helmv2.HelmRelease{
		release(p.Namespace, "app", "app", "v1"),
		release(p.Namespace, "notebook", "app", "nb", func(hr *helmv2.HelmRelease) { hr.Spec.TargetNamespace = "notebooks" }),
	} {
		if err := k8s.Create(ctx, hr); err != nil {
			t.Fatal(err)
		}
		eventually(t, settle, releaseReady(ctx, hr))
	}
	release := testkit.HoldCluster(t, ctx, k8s, p)
	if err := k8s.Get(ctx, key, p); err != nil {
		t.Fatal(err)
	}
	infra := p.Status.InfrastructureNamespace

	deleteWithReleases(t, ctx, p)
	var order []string
	eventually(t, 3*time.Minute, stages(ctx, key, func(stage string) {
		order = append(order, stage)
		switch stage {
		case cpv1.DeletingClusterReason:
			// Everything before the Cluster is done: look at both sides now, while the
			// plane still runs.
			checkPlaneEmptied(t, ctx, plane, p)
			checkManagementBeforeCluster(t, ctx, p, infra)
			release()
		}
		// A crash and a new operator: the teardown resumes from what is there.
		restartOperator(t)
	}))
	t.Logf("stages seen waiting (the operator restarted at each): %v", order)
	want := []string{cpv1.UninstallingPlacementReason, cpv1.DeletingClusterReason}
	if i := indexOf(order, want[0]); i < 0 || indexOf(order, want[1]) < i {
		t.Errorf("teardown stages %v: want %v in that order", order, want)
	}
	testkit.CheckNothingLeft(t, ctx, k8s, p, infra)
}

// checkPlaneEmptied: Flux uninstalled the releases (their objects and Helm's records are
// gone), and the operator removed its identities and namespaces.
func checkPlaneEmptied(t *testing.T, ctx context.Context, plane client.Client, p *cpv1.ComputePlane) {
	t.Helper()
	for _, cm := range []client.ObjectKey{{Namespace: p.Namespace, Name: "app"}, {Namespace: "notebooks", Name: "notebook"}} {
		if err := plane.Get(ctx, cm, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap %s of a placement release is still in the plane (err=%v)", cm, err)
		}
	}
	var secrets corev1.SecretList
	if err := plane.List(ctx, &secrets, client.MatchingLabels{"owner": "helm"}); err != nil || len(secrets.Items) != 0 {
		t.Errorf("%d Helm release records left in the plane (err=%v)", len(secrets.Items), err)
	}
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "computeplane-system", Name: "computeplane-applier"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "computeplane-deployer"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", Name: "computeplane-deployer"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", Name: "computeplane-deployer"}},
	} {
		if err := plane.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) && obj.GetDeletionTimestamp() == nil {
			t.Errorf("%T %s/%s is still in the plane (err=%v)", obj, obj.GetNamespace(), obj.GetName(), err)
		}
	}
	// Namespaces only finish deleting with a namespace controller, which a test
	// apiserver does not run: being deleted is what the operator can do.
	for _, name := range []string{p.Namespace, "notebooks", "computeplane-system"} {
		ns := &corev1.Namespace{}
		if err := plane.Get(ctx, client.ObjectKey{Name: name}, ns); err == nil && ns.DeletionTimestamp.IsZero() {
			t.Errorf("namespace %s of the plane is not being deleted", name)
		}
	}
}

// checkManagementBeforeCluster: by the time the Cluster is deleted, the placement
// releases, the applier credential and the plane's egress baseline are gone from the
// management cluster; the namespace's default deny stays.
func checkManagementBeforeCluster(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, infra string) {
	t.Helper()
	var hrs helmv2.HelmReleaseList
	if err := k8s.List(ctx, &hrs, client.InNamespace(p.Namespace)); err != nil || len(hrs.Items) != 0 {
		t.Errorf("%d placement releases left (err=%v)", len(hrs.Items), err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: tenancy.ApplierSecretName(p)}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the applier credential is still there (err=%v)", err)
	}
	var cnps ciliumv2.CiliumNetworkPolicyList
	if err := k8s.List(ctx, &cnps, client.InNamespace(infra)); err != nil {
		t.Fatal(err)
	}
	if len(cnps.Items) != 1 || cnps.Items[0].Name != "computeplane-default-deny" {
		var names []string
		for _, c := range cnps.Items {
			names = append(names, c.Name)
		}
		t.Errorf("policies while the Cluster goes: %v, want only the default deny", names)
	}
}

// TestTeardownWithADeadPlane: the plane's datastore dies mid-teardown. The teardown waits,
// saying why and since when; a tenant cannot make it give up; a platform operator's
// abandon annotation completes it, and an event names what was left behind.
func TestTeardownWithADeadPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	eventually(t, settle, planeReady(ctx, p))
	key := client.ObjectKeyFromObject(p)
	hr := release(p.Namespace, "stuck", "app", "v1")
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, releaseReady(ctx, hr))
	if err := k8s.Get(ctx, key, p); err != nil {
		t.Fatal(err)
	}
	tenant := provider.Tenant(types.NamespacedName{Namespace: p.Status.InfrastructureNamespace, Name: render.ClusterName(p)})
	if err := tenant.StopEtcd(); err != nil {
		t.Fatal(err)
	}

	deleteWithReleases(t, ctx, p)
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		rec := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReconcilingCondition)
		if rec == nil || rec.Reason != cpv1.UninstallingPlacementReason || !strings.Contains(rec.Message, "(stuck") ||
			!strings.Contains(rec.Message, "waiting for") || !strings.Contains(rec.Message, cpv1.AbandonAnnotation) {
			return fmt.Errorf("Reconciling = %+v", rec)
		}
		return nil
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
		t.Fatalf("a release went before its uninstall could be confirmed: %v", err)
	}

	// The suite's admin is a cluster administrator: it has computeplanes/abandon.
	got := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(got.DeepCopy())
	metav1.SetMetaDataAnnotation(&got.ObjectMeta, cpv1.AbandonAnnotation, "the plane's datastore is lost")
	if err := k8s.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		var evs corev1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(p.Namespace)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "Abandoned" && strings.Contains(e.Message, "placement releases [stuck]") && strings.Contains(e.Message, "datastore is lost") {
				return nil
			}
		}
		return fmt.Errorf("no Abandoned event names the release and the reason")
	})
	// The plane's datastore comes back (the dev provider stops the plane cleanly once
	// its control plane is deleted, perhaps already); the rest of the teardown finishes.
	if err := tenant.StartEtcd(); err != nil && !errors.Is(err, devenv.ErrStopped) {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, stages(ctx, key, nil))
	// The operator's finalizer is off; Flux's own goes when helm-controller next looks,
	// which may be after its retry backoff from the outage (its finalizer change is not
	// an event it reconciles on): it skips the uninstall, the applier credential being
	// gone.
	eventually(t, 2*time.Minute, func() error {
		got := &helmv2.HelmRelease{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), got); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the abandoned release is still there (finalizers %v, err=%v)", got.Finalizers, err)
		}
		return nil
	})
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// deleteWithReleases deletes a plane placement releases run in as its owner does:
// asking for them to be uninstalled with it (without, the delete is refused).
func deleteWithReleases(t testing.TB, ctx context.Context, p *cpv1.ComputePlane) {
	t.Helper()
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		patch := client.MergeFrom(got.DeepCopy())
		metav1.SetMetaDataAnnotation(&got.ObjectMeta, cpv1.UninstallAnnotation, "the test is done with it")
		return k8s.Patch(ctx, got, patch)
	})
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
}
