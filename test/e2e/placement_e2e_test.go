// Package e2e runs placement end to end with the real Flux helm-controller: the
// management apiserver with the operator (its webhooks and policies installed as in
// production), the dev provider standing in for Kamaji with a real plane apiserver per
// ComputePlane, charts served on loopback as ExternalArtifacts, and helm-controller
// v1.6.2 built from the Go module proxy (test/tools/flux.sh), installing into the planes.
// `make e2e` runs it (FLUX_HELM_CONTROLLER names the binary); without it the suite
// skips, so `make test` stays fast.
package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/tenancy"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/devprovider"
	"github.com/cozystack/computeplane/test/operatortest"
	"github.com/cozystack/computeplane/test/testkit"
)

var (
	mgmt     *devenv.Cluster
	k8s      client.Client
	provider *devprovider.Provider
	flux     *devenv.HelmController
	class    *cpv1.ComputePlaneClass
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	binary := os.Getenv("FLUX_HELM_CONTROLLER")
	if binary == "" {
		fmt.Println("e2e: FLUX_HELM_CONTROLLER is not set (make e2e builds and sets it); skipping the real-Flux suite")
		return 0
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	if testing.Verbose() && os.Getenv("E2E_OPERATOR_LOGS") != "" {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	}
	scheme := controllers.NewScheme()
	_ = apiextensionsv1.AddToScheme(scheme)
	var err error
	mgmt, err = devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme, Webhooks: true, Audit: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = mgmt.Stop() }()
	k8s = mgmt.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The dev provider runs in a manager of its own, so the operator can be restarted
	// without taking the planes down.
	var stopProvider func()
	// Audited planes: the burst test reads who wrote what into each plane, and when.
	provider, stopProvider, err = devprovider.StartWith(ctx, mgmt.Config, scheme, devprovider.Options{Tenant: devenv.TenantOptions{Audit: true}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopProvider()
	if err := startOperator(ctx, scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { stopOperator() }() // the operator running at the end, after restarts

	stopCharts, err := devenv.ServeCharts(ctx, k8s, chartsNamespace, charts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopCharts()
	flux, err = devenv.StartHelmController(mgmt, binary)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer flux.Stop()
	class = &cpv1.ComputePlaneClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e"}, Spec: cpv1.ComputePlaneClassSpec{
		AllowedNamespaces: &metav1.LabelSelector{},
		KubernetesVersion: "v1.33.4",
		Addons: []cpv1.SystemAddon{{Name: "cilium", Role: cpv1.AddonRoleCNI, TargetNamespace: "kube-system",
			ChartRef: cpv1.AddonChartRef{Kind: "OCIRepository", Name: "cilium", Namespace: "cozy-system"}}},
		PodSecurity: cpv1.PodSecurityProfile{ExemptNamespaces: []string{"kube-system"}},
		NodeGroups:  cpv1.NodeGroupLimits{MaxGroups: 4, MaxReplicas: 5, InstanceTypes: []string{"u1.medium"}},
		// The suite's charts, as a platform's public catalogue; one application kind
		// placed by the class rather than by a label on each release.
		// The burst's releases retry through the gates it flaps.
		PlacementReleases: cpv1.PlacementReleasePolicy{SourceNamespaces: []string{chartsNamespace},
			Selector:   &metav1.LabelSelector{MatchLabels: map[string]string{applicationKindLabel: "placed-app"}},
			MaxRetries: ptr.To(int32(burstRetries))},
	}}
	if err := k8s.Create(ctx, class); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	code := m.Run()
	// Placement and teardown with the real Flux reach rights the controllers suite does
	// not: none of them may have been refused.
	if refused, _, err := devenv.Refused(mgmt.AuditLog); err != nil || len(refused) > 0 {
		fmt.Fprintf(os.Stderr, "RBAC audit: the operator was refused %v (%v): a right the controllers use is missing from the markers\n", refused, err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintln(os.Stderr, "--- helm-controller log (last 20000 bytes) ---")
		log := flux.Log()
		fmt.Fprintln(os.Stderr, log[max(0, len(log)-20000):])
	}
	return code
}

var (
	operatorScheme *runtime.Scheme
	stopOperator   = func() {}
)

// startOperator runs the operator (controllers and webhooks, as its ServiceAccount, its
// writes counted for the benchmarks) until stopOperator; restartOperator does both, as
// a crash and a new pod would.
func startOperator(ctx context.Context, scheme *runtime.Scheme) error {
	operatorScheme = scheme
	op, err := operatortest.Start(ctx, mgmt, operatortest.Options{
		Options: controllers.Options{
			Setup:           controllers.SetupOptions{Options: controller.Options{MaxConcurrentReconciles: 4}, ReconcileRequests: true},
			RequeueInterval: 2 * time.Second, PlaneTimeout: 2 * time.Second, PlaneUnreachableGrace: 2 * time.Second, Webhooks: true,
		},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper { return &writeCounter{next: rt} },
	})
	stopOperator = func() {
		if op != nil {
			_ = op.Stop()
		}
	}
	return err
}

func restartOperator(t *testing.T) {
	t.Helper()
	stopOperator()
	if err := startOperator(context.Background(), operatorScheme); err != nil {
		t.Fatal(err)
	}
}

const settle = 60 * time.Second

// eventually polls f until it returns nil (every 100 ms: these suites list hundreds of
// releases), failing the test with f's last error.
func eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	testkit.Poll(t, timeout, 100*time.Millisecond, f)
}

// newPlane creates a tenant namespace and a ComputePlane of the suite's class in it
// (the dev provider brings a real plane apiserver up for it).
func newPlane(t testing.TB, ctx context.Context, mut ...func(*cpv1.ComputePlane)) *cpv1.ComputePlane {
	t.Helper()
	return testkit.NewTenantPlane(t, ctx, k8s, class.Name, mut...)
}

func planeReady(ctx context.Context, p *cpv1.ComputePlane) func() error {
	return testkit.ReadyIs(ctx, k8s, p, metav1.ConditionTrue)
}

// planeClient talks to the plane's apiserver as its administrator (what the test
// checks; nothing of the operator's or Flux's goes through it).
func planeClient(t *testing.T, ctx context.Context, p *cpv1.ComputePlane) client.Client {
	t.Helper()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	tenant := provider.Tenant(types.NamespacedName{Namespace: p.Status.InfrastructureNamespace, Name: render.ClusterName(p)})
	if tenant == nil {
		t.Fatal("the dev provider runs no apiserver for the plane")
	}
	return tenant.Client
}

// release is a placement release of one of the suite's charts, with a value.
func release(ns, name, chart, value string, mut ...func(*helmv2.HelmRelease)) *helmv2.HelmRelease {
	hr := &helmv2.HelmRelease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{cpv1.PlacementLabel: cpv1.PlacementLabelValue}},
		Spec: helmv2.HelmReleaseSpec{
			Interval:    metav1.Duration{Duration: time.Minute},
			ReleaseName: name,
			ChartRef:    &helmv2.CrossNamespaceSourceReference{Kind: "ExternalArtifact", Name: chart, Namespace: chartsNamespace},
			// No kubelet runs in a test plane: nothing would ever become ready.
			Install: &helmv2.Install{DisableWait: true},
			Upgrade: &helmv2.Upgrade{DisableWait: true},
		},
	}
	if value != "" {
		hr.Spec.Values = jsonValue(`{"value": "` + value + `"}`)
	}
	for _, m := range mut {
		m(hr)
	}
	return hr
}

// releaseReady checks the release's Flux Ready condition.
func releaseReady(ctx context.Context, hr *helmv2.HelmRelease) func() error {
	return func() error {
		got := &helmv2.HelmRelease{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), got); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, meta.ReadyCondition)
		if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != got.Generation {
			return fmt.Errorf("release %s not Ready: %+v", hr.Name, c)
		}
		return nil
	}
}

// configMapIs checks the chart's ConfigMap in a plane namespace: absent when value is "".
func configMapIs(ctx context.Context, c client.Client, ns, name, value string) func() error {
	return func() error {
		cm := &corev1.ConfigMap{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm)
		switch {
		case value == "" && apierrors.IsNotFound(err):
			return nil
		case value == "" && err == nil:
			return fmt.Errorf("ConfigMap %s/%s is still there", ns, name)
		case err != nil:
			return err
		case cm.Data["value"] != value:
			return fmt.Errorf("ConfigMap %s/%s holds %q, want %q", ns, name, cm.Data["value"], value)
		}
		return nil
	}
}

// TestHeldUntilReadyThenInstalled: a release created with its plane is held while the
// plane comes up, installed into the plane (as the deployer) within seconds of Ready,
// and nothing of it ever lands on the management cluster.
func TestHeldUntilReadyThenInstalled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	hr := release(p.Namespace, "app", "app", "v1")
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, planeReady(ctx, p))
	ready := time.Now()
	eventually(t, settle, releaseReady(ctx, hr))
	t.Logf("installed %s after the plane was Ready", time.Since(ready).Round(time.Millisecond))
	plane := planeClient(t, ctx, p)
	eventually(t, settle, configMapIs(ctx, plane, p.Namespace, "app", "v1"))
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: "app"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the chart's ConfigMap landed on the management cluster (err=%v)", err)
	}
	// Helm's release record is in the plane, in the release's namespace, written as the deployer.
	var secrets corev1.SecretList
	if err := plane.List(ctx, &secrets, client.InNamespace(p.Namespace), client.MatchingLabels{"owner": "helm", "name": "app"}); err != nil || len(secrets.Items) != 1 {
		t.Errorf("Helm's release record is not in the plane's %s namespace: %d (err=%v)", p.Namespace, len(secrets.Items), err)
	}
	// A placement namespace the release chose works too.
	nb := release(p.Namespace, "notebook", "app", "nb", func(hr *helmv2.HelmRelease) { hr.Spec.TargetNamespace = "notebooks" })
	if err := k8s.Create(ctx, nb); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, configMapIs(ctx, plane, "notebooks", "notebook", "nb"))
}

// applicationKindLabel is the label the suite's class places releases by.
const applicationKindLabel = "apps.example.com/kind"

// TestApplicationKindInstalledInThePlane: a release of an application kind the class
// places (spec.placementReleases.selector), with no placement label of its own, is
// installed by the real Flux into the plane, and nothing of it lands on the management
// cluster.
func TestApplicationKindInstalledInThePlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	hr := release(p.Namespace, "kind", "app", "by-kind", func(hr *helmv2.HelmRelease) {
		hr.Labels = map[string]string{applicationKindLabel: "placed-app"}
	})
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	if hr.Labels[cpv1.PlacementLabel] != cpv1.PlacementLabelValue {
		t.Fatalf("stored without the placement label: %v", hr.Labels)
	}
	eventually(t, settle, planeReady(ctx, p))
	eventually(t, settle, releaseReady(ctx, hr))
	eventually(t, settle, configMapIs(ctx, planeClient(t, ctx, p), p.Namespace, "kind", "by-kind"))
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: "kind"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the chart's ConfigMap landed on the management cluster (err=%v)", err)
	}
}

// TestDeployerCannotInstallClusterScoped: a chart that needs cluster-scoped rights fails
// in the plane with the deployer's Forbidden, and lands nowhere.
func TestDeployerCannotInstallClusterScoped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	eventually(t, settle, planeReady(ctx, p))
	hr := release(p.Namespace, "escalate", "clusterwide", "")
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		got := &helmv2.HelmRelease{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), got); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, meta.ReadyCondition)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "forbidden") ||
			!strings.Contains(c.Message, "computeplane-deployer") {
			return fmt.Errorf("release Ready = %+v, want False with the deployer's Forbidden", c)
		}
		return nil
	})
}

// TestClosedGateHoldsUpgradesAndDeletions: with the gate closed (here the spec exceeds
// the class), Flux has no credential: an upgrade waits, and a deleted release stays
// (its objects keep running in the plane) until the gate reopens; then the upgrade
// lands and the deleted release is uninstalled from the plane before it goes.
func TestClosedGateHoldsUpgradesAndDeletions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	eventually(t, settle, planeReady(ctx, p))
	plane := planeClient(t, ctx, p)
	upgraded := release(p.Namespace, "upgraded", "app", "v1")
	deleted := release(p.Namespace, "deleted", "app", "v1")
	for _, hr := range []*helmv2.HelmRelease{upgraded, deleted} {
		if err := k8s.Create(ctx, hr); err != nil {
			t.Fatal(err)
		}
		eventually(t, settle, releaseReady(ctx, hr))
		eventually(t, settle, configMapIs(ctx, plane, p.Namespace, hr.Name, "v1"))
	}

	setMaxReplicas(t, ctx, p, 99) // closes the gate
	secret := client.ObjectKey{Namespace: p.Namespace, Name: tenancy.ApplierSecretName(p)}
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, secret, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("applier credential still issued (err=%v)", err)
		}
		return nil
	})
	if err := k8s.Patch(ctx, upgraded, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"values":{"value":"v2"}}}`))); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if err := configMapIs(ctx, plane, p.Namespace, "upgraded", "v1")(); err != nil {
		t.Errorf("an upgrade went through with the gate closed: %v", err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(deleted), &helmv2.HelmRelease{}); err != nil {
		t.Fatalf("a release deleted with the gate closed is gone before its uninstall (its objects orphaned in the plane): %v", err)
	}
	if err := configMapIs(ctx, plane, p.Namespace, "deleted", "v1")(); err != nil {
		t.Errorf("the deleted release's objects changed with the gate closed: %v", err)
	}

	setMaxReplicas(t, ctx, p, 2) // reopens it
	eventually(t, settle, planeReady(ctx, p))
	eventually(t, settle, configMapIs(ctx, plane, p.Namespace, "upgraded", "v2"))
	eventually(t, settle, configMapIs(ctx, plane, p.Namespace, "deleted", ""))
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(deleted), &helmv2.HelmRelease{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the uninstalled release is still there (err=%v)", err)
		}
		return nil
	})
}

// TestSuspendedReleaseDeletedIsUninstalled: Flux deletes a suspended release without
// uninstalling it; a placement release is resumed first, so it is uninstalled.
func TestSuspendedReleaseDeletedIsUninstalled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	eventually(t, settle, planeReady(ctx, p))
	plane := planeClient(t, ctx, p)
	hr := release(p.Namespace, "paused", "app", "v1")
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, configMapIs(ctx, plane, p.Namespace, "paused", "v1"))
	eventually(t, settle, releaseReady(ctx, hr))
	if err := k8s.Patch(ctx, hr, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`))); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, configMapIs(ctx, plane, p.Namespace, "paused", ""))
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), &helmv2.HelmRelease{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the release is still there (err=%v)", err)
		}
		return nil
	})
}

// TestCredentialRotationMidInstall: the applier token is replaced while releases
// install; they install all the same.
func TestCredentialRotationMidInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	eventually(t, settle, planeReady(ctx, p))
	plane := planeClient(t, ctx, p)
	secretKey := client.ObjectKey{Namespace: p.Namespace, Name: tenancy.ApplierSecretName(p)}
	secret := &corev1.Secret{}
	if err := k8s.Get(ctx, secretKey, secret); err != nil {
		t.Fatal(err)
	}
	oldToken := string(secret.Data["value"])
	var releases []*helmv2.HelmRelease
	for i := range 5 {
		hr := release(p.Namespace, fmt.Sprintf("rotating-%d", i), "app", "v1")
		if err := k8s.Create(ctx, hr); err != nil {
			t.Fatal(err)
		}
		releases = append(releases, hr)
	}
	// The token is near its end: the operator replaces it now (as it would after two
	// thirds of its lifetime).
	patch := client.MergeFrom(secret.DeepCopy())
	secret.Annotations[cpv1.TokenExpiresAtAnnotation] = time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	if err := k8s.Patch(ctx, secret, patch); err != nil {
		t.Fatal(err)
	}
	requestReconcile(t, ctx, p, "rotate")
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, secretKey, secret); err != nil {
			return err
		}
		if string(secret.Data["value"]) == oldToken {
			return errors.New("token not rotated yet")
		}
		return nil
	})
	for _, hr := range releases {
		eventually(t, settle, releaseReady(ctx, hr))
		eventually(t, settle, configMapIs(ctx, plane, p.Namespace, hr.Name, "v1"))
	}
}

func setMaxReplicas(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, n int32) {
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

func requestReconcile(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, stamp string) {
	t.Helper()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, meta.ReconcileRequestAnnotation, stamp)
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
}

func jsonValue(s string) *apiextensionsv1.JSON { return &apiextensionsv1.JSON{Raw: []byte(s)} }
