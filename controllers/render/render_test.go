package render

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func testClass() *cpv1.ComputePlaneClass {
	return &cpv1.ComputePlaneClass{
		ObjectMeta: metav1.ObjectMeta{Name: "std"},
		Spec: cpv1.ComputePlaneClassSpec{
			KubernetesVersion: "v1.33.4",
			ControlPlane:      cpv1.ControlPlaneProfile{Replicas: 2, ServiceType: "ClusterIP", DataStoreName: "etcd-a"},
			Infrastructure:    cpv1.InfrastructureProfile{Placement: cpv1.DedicatedNamespace, NamespacePrefix: "cp-"},
			Addons: []cpv1.SystemAddon{{Name: "cilium", Role: cpv1.AddonRoleCNI, TargetNamespace: "kube-system",
				ChartRef: cpv1.AddonChartRef{Kind: "OCIRepository", Name: "cilium", Namespace: "cozy-system"}}},
		},
	}
}

func testPlane(groups map[string]cpv1.NodeGroup) *cpv1.ComputePlane {
	return &cpv1.ComputePlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "plane", UID: "3f2a9c1b-0000-4000-8000-000000000001"},
		Spec:       cpv1.ComputePlaneSpec{ClassName: "std", NodeGroups: groups},
	}
}

func TestInfrastructureNamespace(t *testing.T) {
	plane := func(ns, uid string) *cpv1.ComputePlane {
		p := testPlane(nil)
		p.Namespace, p.UID = ns, types.UID(uid)
		return p
	}
	classWith := func(prefix string, placement cpv1.InfrastructurePlacement) *cpv1.ComputePlaneClass {
		c := testClass()
		c.Spec.Infrastructure = cpv1.InfrastructureProfile{Placement: placement, NamespacePrefix: prefix}
		return c
	}
	long := strings.Repeat("t", 63)
	cases := []struct {
		name  string
		plane *cpv1.ComputePlane
		class *cpv1.ComputePlaneClass
		want  string
	}{
		{"dedicated", plane("tenant-a", "3f2a9c1b-0000-4000-8000-000000000001"), classWith("cp-", cpv1.DedicatedNamespace), "cp-tenant-a-3f2a9c1b"},
		{"uid case and dashes", plane("tenant-a", "3F2A-9C1B-0000"), classWith("cp-", cpv1.DedicatedNamespace), "cp-tenant-a-3f2a9c1b"},
	}
	for _, tc := range cases {
		if got := InfrastructureNamespace(tc.plane, tc.class); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := InfrastructureNamespace(plane(long, "3f2a9c1b-0000"), classWith("cp-", cpv1.DedicatedNamespace)); len(got) != 63 ||
		!strings.HasPrefix(got, "cp-ttt") || !strings.HasSuffix(got, "-3f2a9c1b") {
		t.Errorf("long namespace = %q (%d chars)", got, len(got))
	}

	// Names whose readable parts collide are told apart by the plane's UID.
	collisions := [][2]string{
		// Overlapping class prefixes: "cp-" + "a-x" and "cp-a-" + "x".
		{InfrastructureNamespace(plane("a-x", "11111111-0000"), classWith("cp-", cpv1.DedicatedNamespace)),
			InfrastructureNamespace(plane("x", "22222222-0000"), classWith("cp-a-", cpv1.DedicatedNamespace))},
		// Long namespaces that agree on the part that survives truncation.
		{InfrastructureNamespace(plane(long, "11111111-0000"), classWith("cp-", cpv1.DedicatedNamespace)),
			InfrastructureNamespace(plane(long[:62]+"u", "22222222-0000"), classWith("cp-", cpv1.DedicatedNamespace))},
		// A plane deleted and created again under the same name.
		{InfrastructureNamespace(plane("tenant-a", "11111111-0000"), classWith("cp-", cpv1.DedicatedNamespace)),
			InfrastructureNamespace(plane("tenant-a", "22222222-0000"), classWith("cp-", cpv1.DedicatedNamespace))},
	}
	for i, c := range collisions {
		if c[0] == c[1] {
			t.Errorf("collision %d: both planes get %q", i, c[0])
		}
	}
}

func TestPlaneGraph(t *testing.T) {
	medium := cpv1.NodeGroup{MinReplicas: 1, MaxReplicas: 3, InstanceType: "u1.medium"}
	cases := []struct {
		name       string
		groups     map[string]cpv1.NodeGroup
		wantKinds  []string
		wantGroups int
	}{
		{"no node groups", nil,
			[]string{"KamajiControlPlane", "KubevirtCluster", "Cluster", "HelmRelease"}, 0},
		{"one node group", map[string]cpv1.NodeGroup{"workers": medium},
			[]string{"KamajiControlPlane", "KubevirtCluster", "Cluster",
				"KubevirtMachineTemplate", "KubeadmConfigTemplate", "MachineDeployment", "MachineHealthCheck",
				"HelmRelease"}, 1},
		{"several, sorted", map[string]cpv1.NodeGroup{"b": medium, "a": medium},
			[]string{"KamajiControlPlane", "KubevirtCluster", "Cluster",
				"KubevirtMachineTemplate", "KubeadmConfigTemplate", "MachineDeployment", "MachineHealthCheck",
				"KubevirtMachineTemplate", "KubeadmConfigTemplate", "MachineDeployment", "MachineHealthCheck",
				"HelmRelease"}, 2},
		{"fixed size: no autoscaler", map[string]cpv1.NodeGroup{"a": {MinReplicas: 2, MaxReplicas: 2, InstanceType: "u1.medium"}},
			[]string{"KamajiControlPlane", "KubevirtCluster", "Cluster",
				"KubevirtMachineTemplate", "KubeadmConfigTemplate", "MachineDeployment", "MachineHealthCheck", "HelmRelease"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			class := testClass()
			g, err := Plane(testPlane(tc.groups), class, class.Spec.KubernetesVersion)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range g.Objects {
				kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind)
				if o.GetLabels()[cpv1.PlaneNameLabel] != "plane" || o.GetLabels()[cpv1.PlaneNamespaceLabel] != "tenant-a" {
					t.Errorf("%s %s lacks the plane labels: %v", kinds[len(kinds)-1], o.GetName(), o.GetLabels())
				}
			}
			if strings.Join(kinds, ",") != strings.Join(tc.wantKinds, ",") {
				t.Errorf("kinds = %v, want %v", kinds, tc.wantKinds)
			}
			if g.Namespace == nil || g.Namespace.Name != InfrastructureNamespace(testPlane(tc.groups), class) {
				t.Errorf("namespace = %v, want the dedicated infrastructure namespace", g.Namespace)
			}
			if len(g.NodeGroups) != tc.wantGroups {
				t.Errorf("node groups = %d, want %d", len(g.NodeGroups), tc.wantGroups)
			}
			if tc.wantGroups == 2 && g.NodeGroups[0].Name != "a" {
				t.Errorf("node groups not sorted: %s first", g.NodeGroups[0].Name)
			}
		})
	}
}

func TestKamajiControlPlaneFromClass(t *testing.T) {
	kcp := KamajiControlPlane(testPlane(nil), testClass())
	for path, want := range map[string]any{
		"spec.version": "v1.33.4", "spec.replicas": int64(2), "spec.dataStoreName": "etcd-a",
		"spec.network.serviceType": "ClusterIP",
	} {
		got, _, _ := unstructured.NestedFieldNoCopy(kcp.Object, strings.Split(path, ".")...)
		if got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if kcp.GetAnnotations()[cpv1.KamajiKubeconfigSecretKeyAnnotation] != "super-admin.svc" {
		t.Errorf("kubeconfig key not pinned: %v", kcp.GetAnnotations())
	}
}

func TestNodeGroupRendering(t *testing.T) {
	gpu := cpv1.NodeGroup{MinReplicas: 0, MaxReplicas: 2,
		Resources: &cpv1.NodeResources{CPU: resource.MustParse("8"), Memory: resource.MustParse("32Gi")},
		DiskSize:  ptrQ("50Gi"),
		GPUs:      []cpv1.NodeGPU{{DeviceName: "nvidia.com/A10", Count: 2}},
		Roles:     []string{"gpu", "worker"}}
	fixed := cpv1.NodeGroup{MinReplicas: 2, MaxReplicas: 2, InstanceType: "u1.large"}
	class := testClass()
	class.Spec.NodeGroups.StorageClassName = "replicated"

	groups, err := NodeGroups(testPlane(map[string]cpv1.NodeGroup{"gpu": gpu, "fixed": fixed}), class, "v1.33.4")
	if err != nil {
		t.Fatal(err)
	}
	fx, gp := groups[0], groups[1]

	// Fixed size: replicas set, no autoscaler bounds.
	if r := fx.MachineDeployment.Spec.Replicas; r == nil || *r != 2 {
		t.Errorf("fixed group replicas = %v, want 2", r)
	}
	if _, ok := fx.MachineDeployment.Annotations[cpv1.AutoscalerMinSizeAnnotation]; ok {
		t.Error("a fixed-size group carries autoscaler annotations")
	}
	// Autoscaled: no replicas, min/max annotations (scale from zero allowed).
	if gp.MachineDeployment.Spec.Replicas != nil {
		t.Errorf("autoscaled group has fixed replicas %d", *gp.MachineDeployment.Spec.Replicas)
	}
	if a := gp.MachineDeployment.Annotations; a[cpv1.AutoscalerMinSizeAnnotation] != "0" || a[cpv1.AutoscalerMaxSizeAnnotation] != "2" {
		t.Errorf("autoscaler annotations = %v", a)
	}
	if ref := gp.MachineDeployment.Spec.Template.Spec.InfrastructureRef; ref.Name != gp.MachineTemplate.GetName() || ref.Kind != KubevirtTemplateKind {
		t.Errorf("infrastructureRef = %+v, template %s", ref, gp.MachineTemplate.GetName())
	}
	if ref := gp.MachineDeployment.Spec.Template.Spec.Bootstrap.ConfigRef; ref.Name != gp.BootstrapTemplate.Name {
		t.Errorf("bootstrap configRef = %+v, template %s", ref, gp.BootstrapTemplate.Name)
	}
	if v := gp.MachineDeployment.Spec.Template.Spec.Version; v != "v1.33.4" {
		t.Errorf("worker version = %q", v)
	}
	if got := *gp.BootstrapTemplate.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs[0].Value; got !=
		"computeplane.cozystack.io/node-group=gpu" {
		t.Errorf("node labels = %q", got)
	}
	if got := gp.MachineDeployment.Spec.Template.Labels; got["node-role.kubernetes.io/gpu"] != "" || got["node-role.kubernetes.io/worker"] != "" ||
		len(got) != len(gp.MachineDeployment.Labels)+2 {
		t.Errorf("machine template labels = %v, want the group's labels and the two roles", got)
	}

	// No SSH from the provider into the VMs: their ingress default deny would refuse it.
	if got := nestedS(gp.MachineTemplate.Object, "spec", "template", "spec", "virtualMachineBootstrapCheck", "checkStrategy"); got != "none" {
		t.Errorf("bootstrap check = %q, want none", got)
	}
	vm := nested(t, gp.MachineTemplate, "spec", "template", "spec", "virtualMachineTemplate", "spec")
	if got := nestedS(vm, "template", "spec", "domain", "cpu", "cores"); got != "8" {
		t.Errorf("cores = %s", got)
	}
	if got := nestedS(vm, "template", "spec", "domain", "memory", "guest"); got != "32Gi" {
		t.Errorf("guest memory = %s", got)
	}
	gpus, _, _ := unstructured.NestedSlice(vm, "template", "spec", "domain", "devices", "gpus")
	if len(gpus) != 2 || gpus[1].(map[string]any)["deviceName"] != "nvidia.com/A10" || gpus[1].(map[string]any)["name"] != "gpu1" {
		t.Errorf("gpus = %v", gpus)
	}
	dvs, _, _ := unstructured.NestedSlice(vm, "dataVolumeTemplates")
	dv := dvs[0].(map[string]any)
	if got := nestedS(dv, "spec", "storage", "resources", "requests", "storage"); got != "50Gi" {
		t.Errorf("disk = %s", got)
	}
	if got := nestedS(dv, "spec", "storage", "storageClassName"); got != "replicated" {
		t.Errorf("storage class = %s", got)
	}
	if got := nestedS(dv, "spec", "source", "registry", "url"); got != "docker://quay.io/capk/ubuntu-2404-container-disk:v1.33.4" {
		t.Errorf("image = %s", got)
	}
	if got := nestedS(vm, "template", "metadata", "labels", cpv1.PlaneNameLabel); got != "plane" {
		t.Errorf("VMI plane label = %q", got)
	}
	// Instance type instead of resources.
	fvm := nested(t, fx.MachineTemplate, "spec", "template", "spec", "virtualMachineTemplate", "spec")
	if got := nestedS(fvm, "instancetype", "name"); got != "u1.large" {
		t.Errorf("instancetype = %q", got)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(fvm, "template", "spec", "domain", "cpu"); found {
		t.Error("an instance-type group also sets cpu")
	}
}

func TestTemplateNamesFollowContent(t *testing.T) {
	g := cpv1.NodeGroup{MinReplicas: 1, MaxReplicas: 3, InstanceType: "u1.medium"}
	render := func(g cpv1.NodeGroup, class *cpv1.ComputePlaneClass) NodeGroup {
		groups, err := NodeGroups(testPlane(map[string]cpv1.NodeGroup{"w": g}), class, class.Spec.KubernetesVersion)
		if err != nil {
			t.Fatal(err)
		}
		return groups[0]
	}
	base := render(g, testClass())
	if again := render(g, testClass()); again.MachineTemplate.GetName() != base.MachineTemplate.GetName() {
		t.Error("the same input gives another template name")
	}
	scaled := g
	scaled.MaxReplicas = 5
	if s := render(scaled, testClass()); s.MachineTemplate.GetName() != base.MachineTemplate.GetName() {
		t.Error("a replica change renamed the machine template (it would roll every node)")
	}
	bigger := g
	bigger.InstanceType = "u1.large"
	if b := render(bigger, testClass()); b.MachineTemplate.GetName() == base.MachineTemplate.GetName() {
		t.Error("a new instance type kept the template name; CAPI templates are immutable")
	}
	upgraded := testClass()
	upgraded.Spec.KubernetesVersion = "v1.34.1"
	u := render(g, upgraded)
	if u.MachineTemplate.GetName() == base.MachineTemplate.GetName() {
		t.Error("a new node image kept the template name")
	}
	if u.MachineDeployment.Spec.Template.Spec.Version != "v1.34.1" {
		t.Error("workers not moved to the new version")
	}
}

func TestWholeCores(t *testing.T) {
	for in, ok := range map[string]bool{"2": true, "2000m": true, "1500m": false, "0": false} {
		_, err := wholeCores(resource.MustParse(in))
		if (err == nil) != ok {
			t.Errorf("wholeCores(%s) err = %v", in, err)
		}
	}
}

func TestAddonsUseTheAdminKubeconfigOnlyInTheInfrastructureNamespace(t *testing.T) {
	hrs := Addons(testPlane(nil), testClass())
	if len(hrs) != 1 {
		t.Fatalf("addons = %d", len(hrs))
	}
	hr := hrs[0]
	if hr.Namespace != "cp-tenant-a-3f2a9c1b" {
		t.Errorf("add-on release in %q, want the infrastructure namespace", hr.Namespace)
	}
	if ref := hr.Spec.KubeConfig.SecretRef; ref.Name != "plane-admin-kubeconfig" || ref.Key != "super-admin.svc" {
		t.Errorf("kubeConfig = %+v", ref)
	}
	if hr.Spec.TargetNamespace != "kube-system" || hr.Spec.ChartRef.Name != "cilium" || hr.Labels[cpv1.AddonRoleLabel] != "CNI" {
		t.Errorf("release = %+v", hr.Spec)
	}
}

func ptrQ(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func nested(t *testing.T, u *unstructured.Unstructured, path ...string) map[string]any {
	t.Helper()
	m, found, err := unstructured.NestedMap(u.Object, path...)
	if err != nil || !found {
		t.Fatalf("%v not found: %v", path, err)
	}
	return m
}

func nestedS(m map[string]any, path ...string) string {
	v, _, _ := unstructured.NestedFieldNoCopy(m, path...)
	if v == nil {
		return ""
	}
	switch t := v.(type) {
	case string:
		return t
	default:
		return strings.TrimSpace(strings.Trim(toString(t), "\""))
	}
}

func toString(v any) string {
	switch t := v.(type) {
	case int64:
		return resource.NewQuantity(t, resource.DecimalSI).String()
	default:
		return ""
	}
}

func TestWorkerVersion(t *testing.T) {
	cases := []struct {
		name      string
		class, cp string
		cpReady   bool
		workers   []string
		want      string
	}{
		{"new plane", "v1.34.1", "", false, nil, "v1.34.1"},
		{"steady", "v1.33.4", "v1.33.4", true, []string{"v1.33.4"}, "v1.33.4"},
		{"control plane still upgrading", "v1.34.1", "v1.33.4", true, []string{"v1.33.4"}, "v1.33.4"},
		{"control plane at the new version but not Ready", "v1.34.1", "v1.34.1", false, []string{"v1.33.4"}, "v1.33.4"},
		{"control plane upgraded: workers follow", "v1.34.1", "v1.34.1", true, []string{"v1.33.4"}, "v1.34.1"},
		{"control plane upgrading, no workers yet", "v1.34.1", "v1.33.4", true, nil, "v1.34.1"},
	}
	for _, tc := range cases {
		if got := WorkerVersion(tc.class, tc.cp, tc.cpReady, tc.workers); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}
