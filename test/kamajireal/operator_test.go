package kamajireal_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/internal/devenv/capistandin"
	"github.com/cozystack/computeplane/internal/devenv/cilium"
	"github.com/cozystack/computeplane/internal/devenv/vm"
	"github.com/cozystack/computeplane/test/operatortest"
	"github.com/cozystack/computeplane/test/testkit"
)

// bed is the operator on real Kamaji: the management apiserver with the operator's
// webhooks, Kamaji with its DataStore and pod runner, the stand-ins for Kamaji's CAPI
// provider and Cluster API core, the operator as its ServiceAccount, and the real Flux
// helm-controller with the suite's charts.
type bed struct {
	mgmt   *devenv.Cluster
	kamaji *devenv.RealKamaji
	flux   *devenv.HelmController
	class  *cpv1.ComputePlaneClass
	// With nodes: Cluster API's real managers, and the VMs its machines boot; the
	// management node whose real cilium-agent networks and polices the VMs' pods, the
	// control-plane pods there, and an address outside the cluster.
	capi *devenv.ClusterAPI
	vms  *vm.Host
	node *cilium.Node
	// autoscalerErr is the cluster-autoscaler stand-in's last error (a string).
	autoscalerErr atomic.Value
	cp            *devenv.ControlPlanePods
	world         *cilium.World
}

// bedOptions choose what runs besides Kamaji and Flux.
type bedOptions struct {
	// nodes runs Cluster API's real core and kubeadm bootstrap managers instead of the
	// Cluster stand-in, and VMs for its machines (CAPK's machine controller stand-in on a
	// vm.Host): node groups become real nodes of the plane. Every VM is in a virt-launcher
	// pod of a management node that a real cilium-agent networks and polices: the plane's
	// control plane, the cluster DNS and the Services a plane may be granted are pods there
	// too, reached through Cilium's own Service translation, so the operator's policies
	// judge the nodes' real packets.
	nodes bool
}

const chartsNamespace = "flux-charts"

// startBed starts everything; it skips when the Kamaji or helm-controller binary is not
// built (make test builds both).
func startBed(t *testing.T, ctx context.Context) *bed {
	t.Helper()
	return startBedWith(t, ctx, bedOptions{})
}

func startBedWith(t *testing.T, ctx context.Context, o bedOptions) *bed {
	t.Helper()
	bin, err := devenv.KamajiBinary()
	if errors.Is(err, devenv.ErrNoKamaji) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	fluxBin := devenv.FluxHelmControllerBinary()
	if fluxBin == "" {
		t.Skip("the Flux helm-controller is not built: run test/tools/flux.sh (`make test` does), or set FLUX_HELM_CONTROLLER to its output")
	}
	scheme := controllers.NewScheme()
	var capiBin, ciliumBin string
	if o.nodes {
		if capiBin, err = devenv.ClusterAPIBinaries(); err != nil {
			t.Skip(err)
		}
	}
	if o.nodes {
		if ciliumBin, err = devenv.CiliumBinaries(); err != nil {
			t.Skip(err)
		}
	}
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme, Webhooks: true, Audit: true, ClusterAPI: o.nodes, Cilium: o.nodes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// On the real Kamaji's objects the operator reaches rights the dev provider's
		// suites do not: none of them may have been refused.
		if refused, _, err := devenv.Refused(mgmt.AuditLog); err != nil || len(refused) > 0 {
			t.Errorf("RBAC audit: the operator was refused %v (%v): a right the controllers use is missing from the markers", refused, err)
		}
		_ = mgmt.Stop()
	})
	b := &bed{mgmt: mgmt}
	if b.kamaji, err = devenv.StartRealKamaji(ctx, mgmt, devenv.RealKamajiOptions{Binary: bin, Proxy: proxy}); err != nil {
		t.Fatal(err)
	}
	b.kamaji.KeepDir = t.Failed()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Kamaji's last log lines:\n%s", b.kamaji.LogTail(40))
		}
		b.kamaji.Stop()
	})
	var standins capistandin.Options
	if o.nodes {
		b.startCilium(t, ctx, ciliumBin)
		b.startNodes(t, ctx, capiBin)
		standins = capistandin.Options{RealCore: true, VMs: b.vms, Autoscaler: true, AutoscalerFailed: func(d string, err error) {
			b.autoscalerErr.Store(fmt.Sprintf("the autoscaler %s: %v", d, err))
		}}
	}
	stopStandins, err := capistandin.StartWith(ctx, mgmt.Config, scheme, standins)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopStandins)
	op, err := operatortest.Start(ctx, mgmt, operatortest.Options{Options: controllers.Options{
		Setup:           controllers.SetupOptions{Options: controller.Options{MaxConcurrentReconciles: 4}, ReconcileRequests: true},
		RequeueInterval: 2 * time.Second, PlaneTimeout: 2 * time.Second, PlaneUnreachableGrace: 2 * time.Second, Webhooks: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Stop() })
	stopCharts, err := devenv.ServeCharts(ctx, mgmt.Client, chartsNamespace, map[string]devenv.Chart{
		"app": {"templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  value: {{ .Values.value | default \"v1\" | quote }}\n"},
		// The class's CNI add-on: one ConfigMap (nothing runs pods here).
		"cni": {"templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cni\ndata:\n  installed: \"true\"\n"},
		// A tenant's workload, for planes with nodes: a Deployment of the VM image's
		// busybox that the restricted profile admits, and a pod that runs as root.
		"web":  devenv.WebChart(),
		"root": {"templates/pod.yaml": rootPodManifest},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopCharts)
	// Flux inherits this process's HTTPS_PROXY (TestMain): it reaches the plane at the
	// address the applier kubeconfig names, Kamaji's .svc name.
	if b.flux, err = devenv.StartHelmController(mgmt, fluxBin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			log := b.flux.Log()
			t.Logf("helm-controller's log (last 6000 bytes):\n%s", log[max(0, len(log)-6000):])
		}
		b.flux.Stop()
	})
	// The version Kamaji v1.0.0 supports; the CNI add-on is the suite's chart, which Flux
	// installs into the plane with Kamaji's admin kubeconfig.
	b.class = &cpv1.ComputePlaneClass{ObjectMeta: metav1.ObjectMeta{Name: "kamaji"}, Spec: cpv1.ComputePlaneClassSpec{
		AllowedNamespaces: &metav1.LabelSelector{},
		KubernetesVersion: "v1.30.2",
		Addons: []cpv1.SystemAddon{{Name: "cni", Role: cpv1.AddonRoleCNI, TargetNamespace: "kube-system",
			ChartRef: cpv1.AddonChartRef{Kind: "ExternalArtifact", Name: "cni", Namespace: chartsNamespace}}},
		PodSecurity:       cpv1.PodSecurityProfile{ExemptNamespaces: []string{"kube-system"}},
		NodeGroups:        cpv1.NodeGroupLimits{MaxGroups: 2, MaxReplicas: 3, InstanceTypes: []string{"u1.medium"}},
		PlacementReleases: cpv1.PlacementReleasePolicy{SourceNamespaces: []string{chartsNamespace}},
	}}
	if o.nodes {
		// Nodes join with the test bed's kubeadm and kubelet, v1.36.3, which refuse a
		// control plane older than v1.35 (and the pod runner runs v1.36.3 whatever the
		// TenantControlPlane says): the plane's version is theirs. Kamaji's validating
		// webhook, which caps versions at v1.30.2, is not registered here.
		b.class.Spec.KubernetesVersion = "v1.36.3"
		b.class.Spec.NodeGroups.InstanceTypes = []string{"u1.medium", "u1.large"}
		// A node whose kubelet is gone is replaced once its plane marks it NotReady and
		// that held 5 s; one node of one may be remediated.
		b.class.Spec.NodeGroups.HealthCheck = cpv1.NodeHealthCheck{
			UnhealthyNodeConditions: []cpv1.UnhealthyNodeCondition{
				{Type: string(corev1.NodeReady), Status: string(corev1.ConditionUnknown), TimeoutSeconds: 5},
				{Type: string(corev1.NodeReady), Status: string(corev1.ConditionFalse), TimeoutSeconds: 5},
			},
			UnhealthyLessThanOrEqualTo: ptr.To(intstr.FromInt32(1)),
		}
	}
	if err := mgmt.Client.Create(ctx, b.class); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOperatorOnRealKamaji: a ComputePlane goes from nothing to Ready on a
// TenantControlPlane real Kamaji made, through the super-admin.svc kubeconfig Kamaji
// wrote (reachable only at the in-cluster name, through the proxy); the plane Kamaji's
// apiserver serves is hardened; the real Flux installs a placement release there; and
// the teardown uninstalls it and lets Kamaji delete its control plane.
func TestOperatorOnRealKamaji(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	b := startBed(t, ctx)
	k8s := b.mgmt.Client

	p, tcp, secret := b.readyPlane(t, ctx)
	infra := p.Status.InfrastructureNamespace
	if tcp.Labels[cpv1.PlaneUIDLabel] != string(p.UID) {
		t.Errorf("the provider did not copy the KamajiControlPlane's labels onto the TenantControlPlane: %v", tcp.Labels)
	}
	if _, ok := b.kamaji.Runner.APIServer(infra, tcp.Name); !ok {
		t.Fatal("the pod runner serves no kube-apiserver for the plane")
	}

	// The plane Kamaji's apiserver serves is hardened: the placement namespace and the
	// deployer exist there, and the deployer may not write cluster-wide.
	plane := planeClient(t, secret.Data[render.AdminKubeconfigKey], tcp)
	ns := &corev1.Namespace{}
	if err := plane.Get(ctx, client.ObjectKey{Name: "notebooks"}, ns); err != nil {
		t.Fatalf("the placement namespace is not in the plane: %v", err)
	}
	if ns.Labels[cpv1.PlaneUIDLabel] != string(p.UID) {
		t.Errorf("the placement namespace in the plane lacks the plane's labels: %v", ns.Labels)
	}
	if err := plane.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: "computeplane-deployer"}, &corev1.ServiceAccount{}); err != nil {
		t.Errorf("the deployer is not in the plane: %v", err)
	}

	// The plane's kube-controller-manager (the pod runner runs it next to the
	// kube-apiserver, as the pod Kamaji makes does) gives the placement namespace its
	// default ServiceAccount; only then does a pod there reach Pod Security, whose own
	// message must be the refusal of one that runs as root (the baseline profile allows
	// it, the plane's restricted one does not). Without the ServiceAccount the refusal
	// would be the ServiceAccount admission plugin's, which proves nothing.
	testkit.Poll(t, time.Minute, 100*time.Millisecond, func() error {
		return plane.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: "default"}, &corev1.ServiceAccount{})
	})
	rootPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", Name: "root"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "root", Image: "busybox", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}}}}}
	if err := plane.Create(ctx, rootPod, client.DryRunAll); err == nil || !strings.Contains(err.Error(), `violates PodSecurity "restricted:`) {
		t.Errorf("a pod that runs as root in the placement namespace: %v; want Pod Security's restricted refusal", err)
	}

	// The real Flux installs a placement release into that plane.
	hr := &helmv2.HelmRelease{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "notebook", Labels: map[string]string{cpv1.PlacementLabel: cpv1.PlacementLabelValue}},
		Spec: helmv2.HelmReleaseSpec{
			Interval: metav1.Duration{Duration: time.Minute}, ReleaseName: "notebook", TargetNamespace: "notebooks",
			ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "ExternalArtifact", Name: "app", Namespace: chartsNamespace},
			Install:  &helmv2.Install{DisableWait: true}, Upgrade: &helmv2.Upgrade{DisableWait: true},
		},
	}
	placed := time.Now()
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 2*time.Minute, 100*time.Millisecond, func() error {
		got := &helmv2.HelmRelease{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), got); err != nil {
			return err
		}
		if c := apimeta.FindStatusCondition(got.Status.Conditions, meta.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("release not Ready: %+v", c)
		}
		return plane.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: "notebook"}, &corev1.ConfigMap{})
	})
	t.Logf("placement release created → installed by Flux in the Kamaji plane: %s", time.Since(placed).Round(time.Millisecond))
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: "notebook"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the chart's ConfigMap reached the management cluster (err=%v)", err)
	}

	checkDeployerCannotFillTheDataStore(t, ctx, secret.Data[render.AdminKubeconfigKey], tcp, p)

	// Teardown: the release is uninstalled from the plane, then Cluster API (stand-in)
	// deletes the KamajiControlPlane, the TenantControlPlane goes through Kamaji's
	// finalizers, and the pod runner stops the control plane.
	patch := client.MergeFrom(p.DeepCopy())
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, cpv1.UninstallAnnotation, "the test is done with it")
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 2*time.Minute, 100*time.Millisecond, func() error {
		err := plane.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: "notebook"}, &corev1.ConfigMap{})
		if err == nil {
			return errors.New("the release's ConfigMap is still in the plane")
		}
		if !apierrors.IsNotFound(err) {
			// The plane may already be gone; the release record says Flux uninstalled.
			got := &helmv2.HelmRelease{}
			if gerr := k8s.Get(ctx, client.ObjectKeyFromObject(hr), got); !apierrors.IsNotFound(gerr) {
				return fmt.Errorf("the plane answers %v and the release is still there", err)
			}
		}
		return nil
	})
	testkit.Poll(t, 3*time.Minute, 200*time.Millisecond, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the ComputePlane is still there (%v): %s", err, describeConditions(got.Status.Conditions))
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(tcp), &kamajiv1alpha1.TenantControlPlane{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the TenantControlPlane is still there (%v)", err)
		}
		if _, ok := b.kamaji.Runner.APIServer(infra, tcp.Name); ok {
			return errors.New("the plane's kube-apiserver still runs")
		}
		return nil
	})
	t.Logf("ComputePlane deleted → gone, its TenantControlPlane deleted by Kamaji and its apiserver stopped: %s",
		time.Since(deleted).Round(time.Millisecond))
	var deploys appsv1.DeploymentList
	if err := k8s.List(ctx, &deploys, client.InNamespace(infra)); err != nil || len(deploys.Items) != 0 {
		t.Errorf("%d Deployments left in %s (err=%v)", len(deploys.Items), infra, err)
	}
}

// readyPlane creates a tenant namespace and a ComputePlane in it and waits for it to be
// Ready on the TenantControlPlane real Kamaji made; it returns the plane, the
// TenantControlPlane and Kamaji's admin kubeconfig Secret.
func (b *bed) readyPlane(t *testing.T, ctx context.Context) (*cpv1.ComputePlane, *kamajiv1alpha1.TenantControlPlane, *corev1.Secret) {
	t.Helper()
	created := time.Now()
	return b.readyPlaneNamed(t, ctx, testkit.NewTenantPlane(t, ctx, b.mgmt.Client, b.class.Name), created)
}

// readyPlaneNamed is readyPlane for a ComputePlane the caller created.
func (b *bed) readyPlaneNamed(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, created time.Time) (*cpv1.ComputePlane, *kamajiv1alpha1.TenantControlPlane, *corev1.Secret) {
	t.Helper()
	k8s := b.mgmt.Client
	var tcpReady time.Duration // when Kamaji first reported its TenantControlPlane Ready
	testkit.Poll(t, 3*time.Minute, 100*time.Millisecond, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		if tcpReady == 0 && got.Status.InfrastructureNamespace != "" {
			tcp := &kamajiv1alpha1.TenantControlPlane{}
			err := k8s.Get(ctx, client.ObjectKey{Namespace: got.Status.InfrastructureNamespace, Name: render.ClusterName(got)}, tcp)
			if st := tcp.Status.Kubernetes.Version.Status; err == nil && st != nil && *st == kamajiv1alpha1.VersionReady {
				tcpReady = time.Since(created)
			}
		}
		if !apimeta.IsStatusConditionTrue(got.Status.Conditions, cpv1.ReadyCondition) {
			return fmt.Errorf("not Ready: %s", describeConditions(got.Status.Conditions))
		}
		*p = *got
		return nil
	})
	t.Logf("ComputePlane created → Ready on real Kamaji: %s (Kamaji reported its TenantControlPlane Ready after %s)",
		time.Since(created).Round(time.Millisecond), tcpReady.Round(time.Millisecond))
	tcp := &kamajiv1alpha1.TenantControlPlane{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: p.Status.InfrastructureNamespace, Name: render.ClusterName(p)}, tcp); err != nil {
		t.Fatal(err)
	}
	if tcp.Status.KubeConfig.Admin.SecretName != render.ClusterName(p)+"-admin-kubeconfig" || tcp.Spec.DataStore != devenv.KamajiDataStoreName {
		t.Errorf("TenantControlPlane: admin kubeconfig %q, dataStore %q", tcp.Status.KubeConfig.Admin.SecretName, tcp.Spec.DataStore)
	}
	secret := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: tcp.Namespace, Name: tcp.Status.KubeConfig.Admin.SecretName}, secret); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("https://%s.%s.svc:6443", tcp.Name, tcp.Namespace); !strings.Contains(string(secret.Data[render.AdminKubeconfigKey]), want) {
		t.Fatalf("Kamaji's %s does not name %s", render.AdminKubeconfigKey, want)
	}
	return p, tcp, secret
}

// planeClient is the plane's administrator, from the kubeconfig Kamaji wrote, through
// the proxy (what the test checks with; the operator has its own connection).
func planeClient(t *testing.T, kubeconfig []byte, tcp *kamajiv1alpha1.TenantControlPlane) client.Client {
	t.Helper()
	return planeClientAs(t, kubeconfig, tcp, "")
}

func describeConditions(conds []metav1.Condition) string {
	var parts []string
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s/%s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(parts, "; ")
}
