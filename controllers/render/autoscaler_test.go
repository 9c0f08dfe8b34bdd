package render

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/remote/posture"
)

var (
	fixed      = cpv1.NodeGroup{MinReplicas: 2, MaxReplicas: 2, InstanceType: "u1.medium"}
	autoscaled = cpv1.NodeGroup{MinReplicas: 0, MaxReplicas: 4, InstanceType: "u1.medium"}
)

// TestAutoscalerOnlyWhileAGroupAutoscales: no node group, only fixed groups, and groups
// of which one autoscales.
func TestAutoscalerOnlyWhileAGroupAutoscales(t *testing.T) {
	for _, tc := range []struct {
		name   string
		groups map[string]cpv1.NodeGroup
		want   bool
	}{
		{"no groups", nil, false},
		{"fixed", map[string]cpv1.NodeGroup{"a": fixed, "b": fixed}, false},
		{"one of two autoscales", map[string]cpv1.NodeGroup{"a": fixed, "gpu": autoscaled}, true},
		{"min 1 max 3", map[string]cpv1.NodeGroup{"a": {MinReplicas: 1, MaxReplicas: 3, InstanceType: "u1.medium"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Plane(testPlane(tc.groups), testClass(), "v1.33.4")
			if err != nil {
				t.Fatal(err)
			}
			if got := len(g.Autoscaler) > 0; got != tc.want {
				t.Fatalf("autoscaler rendered = %v, want %v", got, tc.want)
			}
			// Written with the operator's rights in the infrastructure namespace alone, not
			// with the graph's.
			for _, o := range g.Autoscaler {
				if slices.Contains(g.Objects, o) {
					t.Errorf("%T %s is applied with the graph", o, o.GetName())
				}
			}
		})
	}
}

// TestAutoscalerObjects: the autoscaler's identity, its one binding (the shipped role,
// in the infrastructure namespace, to its own ServiceAccount), and its Deployment's
// flags, kubeconfig and confinement.
func TestAutoscalerObjects(t *testing.T) {
	class := testClass()
	plane := testPlane(map[string]cpv1.NodeGroup{"gpu": autoscaled})
	objs := Autoscaler(plane, class)
	if len(objs) != 3 {
		t.Fatalf("%d objects", len(objs))
	}
	sa, rb, d := objs[0].(*corev1.ServiceAccount), objs[1].(*rbacv1.RoleBinding), objs[2].(*appsv1.Deployment)
	const ns, name = "cp-tenant-a-3f2a9c1b", "plane-cluster-autoscaler"
	for _, o := range objs {
		if o.GetNamespace() != ns || o.GetName() != name {
			t.Errorf("%T at %s/%s, want %s/%s", o, o.GetNamespace(), o.GetName(), ns, name)
		}
		if !labels.SelectorFromSet(PlaneSelector(plane)).Matches(labels.Set(o.GetLabels())) {
			t.Errorf("%T %s does not carry the plane's labels: %v", o, o.GetName(), o.GetLabels())
		}
		if o.GetObjectKind().GroupVersionKind().Kind == "" {
			t.Errorf("%T has no kind", o)
		}
	}
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AutoscalerClusterRole}) {
		t.Errorf("roleRef = %+v", rb.RoleRef)
	}
	if want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}}; !slices.Equal(rb.Subjects, want) {
		t.Errorf("subjects = %+v, want %+v", rb.Subjects, want)
	}

	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != sa.Name || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("serviceAccountName %q, replicas %d, strategy %s", pod.ServiceAccountName, *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	c := pod.Containers[0]
	wantArgs := []string{
		"--cloud-provider=clusterapi",
		"--clusterapi-cloud-config-authoritative",
		"--kubeconfig=/etc/cluster-autoscaler/workload/kubeconfig",
		"--namespace=" + posture.AutoscalerNamespace,
		"--node-group-auto-discovery=clusterapi:namespace=" + ns + ",clusterName=plane",
		"--enforce-node-group-min-size=true",
	}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args = %q, want %q", c.Args, wantArgs)
	}
	if c.Image != "registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.0" {
		t.Errorf("image = %q", c.Image)
	}
	// Its own identity's kubeconfig, never the plane's admin one.
	v := pod.Volumes[0].Secret
	if v == nil || v.SecretName != "plane-cluster-autoscaler-kubeconfig" || len(v.Items) != 1 || v.Items[0].Key != AutoscalerKubeconfigKey || v.Items[0].Path != "kubeconfig" {
		t.Errorf("kubeconfig volume = %+v", pod.Volumes[0])
	}
	// The VMs' policies select the plane's labels and virt-launcher's: the autoscaler's
	// pods must carry neither, or they lose the management kube-apiserver.
	podLabels := labels.Set(d.Spec.Template.Labels)
	if labels.SelectorFromSet(PlaneSelector(plane)).Matches(podLabels) || podLabels["kubevirt.io"] != "" {
		t.Errorf("the autoscaler's pods carry labels the VMs' policies select: %v", podLabels)
	}
	if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(podLabels) {
		t.Errorf("selector %v does not select the pods %v", d.Spec.Selector.MatchLabels, podLabels)
	}
	sc := c.SecurityContext
	if !*pod.SecurityContext.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("not restricted: pod %+v, container %+v", pod.SecurityContext, sc)
	}
}

func TestAutoscalerImage(t *testing.T) {
	for _, tc := range []struct{ version, image, want string }{
		{"v1.33.4", "", "registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.0"},
		{"v1.35.1", "", "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.0"},
		{"v1.33.4", "mirror.example/ca:v1.33.2", "mirror.example/ca:v1.33.2"},
	} {
		c := testClass()
		c.Spec.KubernetesVersion, c.Spec.NodeGroups.Autoscaler.Image = tc.version, tc.image
		if got := AutoscalerImage(c); got != tc.want {
			t.Errorf("AutoscalerImage(%s, %q) = %q, want %q", tc.version, tc.image, got, tc.want)
		}
	}
}
