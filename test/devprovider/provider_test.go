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
	"github.com/cozystack/computeplane/test/devprovider"
	"github.com/cozystack/computeplane/test/testenv"
)

// TestProviderReportsLikeKamaji: a KamajiControlPlane gets a running tenant apiserver,
// a TenantControlPlane whose status reads Ready through the kamaji types, and an admin
// kubeconfig Secret that reaches that apiserver; deleting it stops the apiserver.
func TestProviderReportsLikeKamaji(t *testing.T) {
	scheme := controllers.NewScheme()
	mgmt, err := testenv.StartManagement(testenv.ManagementOptions{Scheme: scheme})
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
	testenv.Eventually(t, 30*time.Second, f)
}
