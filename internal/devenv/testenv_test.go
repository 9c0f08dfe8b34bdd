package devenv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
)

// TestManagementHasRealUpstreamCRDs proves that the management apiserver serves our CRDs
// and the upstream ones, and that objects built from the upstream Go types pass the
// upstream schemas (and that schemas reject what they should).
func TestManagementHasRealUpstreamCRDs(t *testing.T) {
	scheme := controllers.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgmt.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := mgmt.Client

	want := []string{
		"computeplanes.computeplane.cozystack.io",
		"computeplaneclasses.computeplane.cozystack.io",
		"clusters.cluster.x-k8s.io",
		"machinedeployments.cluster.x-k8s.io",
		"tenantcontrolplanes.kamaji.clastix.io",
		"kamajicontrolplanes.controlplane.cluster.x-k8s.io",
		"kubevirtclusters.infrastructure.cluster.x-k8s.io",
		"kubevirtmachinetemplates.infrastructure.cluster.x-k8s.io",
		"ciliumnetworkpolicies.cilium.io",
		"helmreleases.helm.toolkit.fluxcd.io",
		"ocirepositories.source.toolkit.fluxcd.io",
	}
	for _, name := range want {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			t.Errorf("CRD %s not served: %v", name, err)
		}
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "upstream"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	valid := []client.Object{
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "upstream", Name: "c1"},
			Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "controlplane.cluster.x-k8s.io", Kind: "KamajiControlPlane", Name: "c1"}}},
		&kamajiv1alpha1.TenantControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: "upstream", Name: "tcp1"},
			Spec: kamajiv1alpha1.TenantControlPlaneSpec{
				ControlPlane: kamajiv1alpha1.ControlPlane{Service: kamajiv1alpha1.ServiceSpec{ServiceType: "ClusterIP"}},
				Kubernetes:   kamajiv1alpha1.KubernetesSpec{Version: "v1.33.0", Kubelet: kamajiv1alpha1.KubeletSpec{CGroupFS: "systemd"}},
			}},
		&ciliumv2.CiliumNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "upstream", Name: "p1"}},
		&helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: "upstream", Name: "r1"},
			Spec: helmv2.HelmReleaseSpec{Interval: metav1.Duration{Duration: time.Minute},
				ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "chart"}}},
	}
	for _, o := range valid {
		if err := c.Create(ctx, o); err != nil {
			t.Errorf("creating %T with the upstream types: %v", o, err)
		}
	}

	// The real KamajiControlPlane schema (its Go types cannot be a dependency) accepts a
	// well-formed object and rejects a malformed one with its own message.
	kcp := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "controlplane.cluster.x-k8s.io/v1alpha2", "kind": "KamajiControlPlane",
			"metadata": map[string]any{"namespace": "upstream", "name": name},
			"spec":     spec,
		}}
	}
	if err := c.Create(ctx, kcp("good", map[string]any{"version": "v1.33.0", "replicas": int64(2)})); err != nil {
		t.Errorf("a well-formed KamajiControlPlane was refused: %v", err)
	}
	err = c.Create(ctx, kcp("bad", map[string]any{"version": "v1.33.0", "replicas": "two"}))
	if err == nil || !strings.Contains(err.Error(), "spec.replicas") {
		t.Errorf("KamajiControlPlane with replicas: \"two\": got %v, want a schema error on spec.replicas", err)
	}
	// Flux's schema rejects a HelmRelease without interval.
	bad := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: "upstream", Name: "bad"},
		Spec: helmv2.HelmReleaseSpec{Interval: metav1.Duration{Duration: time.Minute}}}
	err = c.Create(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "either chart or chartRef must be set") {
		t.Errorf("HelmRelease without a chart: got %v, want Flux's CEL rule to refuse it", err)
	}
}

// TestTenantAdminKubeconfig proves a tenant apiserver is independent and reachable
// through an admin kubeconfig Secret shaped as Kamaji writes it.
func TestTenantAdminKubeconfig(t *testing.T) {
	scheme := controllers.NewScheme()
	tenant, err := devenv.StartTenant(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })

	secret, err := devenv.AdminKubeconfigSecret(tenant, "cp-team-a", "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if secret.Name != "team-a-admin-kubeconfig" {
		t.Errorf("secret name = %q, want Kamaji's <name>-admin-kubeconfig", secret.Name)
	}
	for _, key := range []string{"admin.conf", "admin.svc", "super-admin.conf", "super-admin.svc"} {
		if len(secret.Data[key]) == 0 {
			t.Errorf("secret has no %s", key)
		}
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["super-admin.conf"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "only-in-tenant"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("the admin kubeconfig cannot create a namespace: %v", err)
	}
	if err := tenant.Client.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{}); err != nil {
		t.Errorf("namespace created through the kubeconfig is not in the tenant apiserver: %v", err)
	}
}
