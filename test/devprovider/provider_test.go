package devprovider_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/devprovider"
	"github.com/cozystack/computeplane/test/testkit"
)

// TestProviderReportsLikeKamaji: a KamajiControlPlane gets a running tenant apiserver,
// a TenantControlPlane whose status reads Ready through the kamaji types, and an admin
// kubeconfig Secret that reaches that apiserver; deleting it stops the apiserver.
func TestProviderReportsLikeKamaji(t *testing.T) {
	scheme := controllers.NewScheme()
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgmt.Stop() })
	mgr, err := ctrl.NewManager(mgmt.Config, ctrl.Options{Scheme: scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	p := &devprovider.Provider{Client: mgr.GetClient(), Scheme: scheme}
	if err := p.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() { _ = mgr.Start(ctx) }()
	t.Cleanup(p.Stop)

	c := mgmt.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cp-team"}}); err != nil {
		t.Fatal(err)
	}
	kcp := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": "cp-team", "name": "team"},
		"spec":     map[string]any{"version": "v1.33.4", "replicas": int64(2)},
	}}
	kcp.SetGroupVersionKind(devprovider.KamajiControlPlaneGVK)
	if err := c.Create(ctx, kcp); err != nil {
		t.Fatal(err)
	}

	tcp := &kamajiv1alpha1.TenantControlPlane{}
	poll(t, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: "cp-team", Name: "team"}, tcp); err != nil {
			return err
		}
		if s := tcp.Status.Kubernetes.Version.Status; s == nil || *s != kamajiv1alpha1.VersionReady {
			return fmt.Errorf("TenantControlPlane version status = %v", s)
		}
		return nil
	})
	if tcp.Status.Kubernetes.Version.Version != "v1.33.4" || tcp.Status.KubeConfig.Admin.SecretName != "team-admin-kubeconfig" {
		t.Errorf("TenantControlPlane status = %+v", tcp.Status)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "cp-team", Name: "team-admin-kubeconfig"}, secret); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["super-admin.svc"])
	if err != nil {
		t.Fatal(err)
	}
	tc, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.List(ctx, &corev1.NamespaceList{}); err != nil {
		t.Errorf("the admin kubeconfig does not reach the tenant apiserver: %v", err)
	}
	poll(t, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(kcp), kcp); err != nil {
			return err
		}
		if ready, _, _ := unstructured.NestedBool(kcp.Object, "status", "ready"); !ready {
			return errors.New("KamajiControlPlane not ready")
		}
		return nil
	})

	if err := c.Delete(ctx, kcp); err != nil {
		t.Fatal(err)
	}
	poll(t, func() error {
		if p.Tenant(types.NamespacedName{Namespace: "cp-team", Name: "team"}) != nil {
			return errors.New("tenant apiserver still running")
		}
		return nil
	})
	if err := tc.List(ctx, &corev1.NamespaceList{}); err == nil {
		t.Error("the tenant apiserver still answers after its KamajiControlPlane was deleted")
	}
}

func poll(t *testing.T, f func() error) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, f)
}

// TestSharedProviderServesPlanesFromOneAPIServer: with Shared, two planes get one tenant
// apiserver, each through its own endpoint and admin kubeconfig; each sees the shared
// objects under its own tenant namespace and UID (reads, writes and watches), and
// deleting one plane leaves the apiserver serving the other.
func TestSharedProviderServesPlanesFromOneAPIServer(t *testing.T) {
	scheme := controllers.NewScheme()
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgmt.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, stop, err := devprovider.StartWith(ctx, mgmt.Config, scheme, devprovider.Options{Shared: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	c := mgmt.Client
	planes := map[string]string{"fleet-0001": "11111111-1111-1111-1111-111111111111", "fleet-0002": "22222222-2222-2222-2222-222222222222"}
	clients := map[string]client.WithWatch{}
	var kcps []*unstructured.Unstructured
	for _, ns := range []string{"fleet-0001", "fleet-0002"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		kcp := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"namespace": ns, "name": "plane", "labels": map[string]any{
				"computeplane.cozystack.io/name": "plane", "computeplane.cozystack.io/namespace": ns,
				"computeplane.cozystack.io/uid": planes[ns]}},
			"spec": map[string]any{"version": "v1.33.4", "replicas": int64(1)},
		}}
		kcp.SetGroupVersionKind(devprovider.KamajiControlPlaneGVK)
		if err := c.Create(ctx, kcp); err != nil {
			t.Fatal(err)
		}
		kcps = append(kcps, kcp)
		secret := &corev1.Secret{}
		poll(t, func() error {
			return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "plane-admin-kubeconfig"}, secret)
		})
		cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["super-admin.svc"])
		if err != nil {
			t.Fatal(err)
		}
		if clients[ns], err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
			t.Fatal(err)
		}
	}
	k1, k2 := types.NamespacedName{Namespace: "fleet-0001", Name: "plane"}, types.NamespacedName{Namespace: "fleet-0002", Name: "plane"}
	if p.Tenant(k1) == nil || p.Tenant(k1) != p.Tenant(k2) || len(p.SharedTenants()) != 1 {
		t.Fatalf("two planes with Shared=1 are not served by one apiserver (%d started)", len(p.SharedTenants()))
	}
	shared := p.Tenant(k1).Client

	// Plane 2 writes its namespace, labelled with its UID: the apiserver holds plane
	// 1's, and each plane reads it back as its own.
	ns2 := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet-0002",
		Labels: map[string]string{"computeplane.cozystack.io/uid": planes["fleet-0002"]}}}
	if err := clients["fleet-0002"].Create(ctx, ns2); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Namespace{}
	if err := shared.Get(ctx, client.ObjectKey{Name: "fleet-0001"}, got); err != nil || got.Labels["computeplane.cozystack.io/uid"] != planes["fleet-0001"] {
		t.Fatalf("the shared apiserver holds %v (%v), want the canonical plane's namespace and UID", got.Labels, err)
	}
	for ns, uid := range planes {
		if err := clients[ns].Get(ctx, client.ObjectKey{Name: ns}, got); err != nil || got.Labels["computeplane.cozystack.io/uid"] != uid {
			t.Fatalf("plane %s reads %v (%v)", ns, got.Labels, err)
		}
	}

	// A watch through a view delivers each event at once, rewritten.
	w, err := clients["fleet-0002"].Watch(ctx, &corev1.NamespaceList{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := shared.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet-0001-extra"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for found := false; !found; {
		select {
		case ev := <-w.ResultChan():
			if ns, ok := ev.Object.(*corev1.Namespace); ok && ns.Name == "fleet-0002-extra" {
				found = true
			}
		case <-deadline:
			t.Fatal("no rewritten watch event within 10 s")
		}
	}

	// Deleting plane 1 closes its endpoint, not the apiserver plane 2 shares.
	if err := c.Delete(ctx, kcps[0]); err != nil {
		t.Fatal(err)
	}
	poll(t, func() error {
		if err := clients["fleet-0001"].List(ctx, &corev1.NamespaceList{}); err == nil {
			return errors.New("plane 1's endpoint still answers")
		}
		return nil
	})
	if err := clients["fleet-0002"].List(ctx, &corev1.NamespaceList{}); err != nil {
		t.Fatalf("plane 2 lost its apiserver with plane 1: %v", err)
	}
}
