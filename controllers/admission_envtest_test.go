package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

var medium = cpv1.NodeGroup{MinReplicas: 0, MaxReplicas: 2, InstanceType: "u1.medium"}

// TestAdmissionRejectsBadPlanes sends invalid ComputePlanes to the real apiserver (CRD
// schema, CEL and the webhook) and checks that each is refused with a clear message.
func TestAdmissionRejectsBadPlanes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenantNamespace(t, ctx)

	cases := []struct {
		name  string
		plane *cpv1.ComputePlane
		want  string
	}{
		{"min above max", newPlane(ns, "p", "c", withGroup("workers",
			cpv1.NodeGroup{MinReplicas: 3, MaxReplicas: 2, InstanceType: "u1.medium"})),
			"minReplicas must be less than or equal to maxReplicas"},
		{"instance type and resources", newPlane(ns, "p", "c", withGroup("workers",
			cpv1.NodeGroup{MaxReplicas: 2, InstanceType: "u1.medium", Resources: &cpv1.NodeResources{
				CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")}})),
			"set exactly one of instanceType or resources"},
		{"neither instance type nor resources", newPlane(ns, "p", "c", withGroup("workers",
			cpv1.NodeGroup{MaxReplicas: 2})),
			"set exactly one of instanceType or resources"},
		{"malformed node group name", newPlane(ns, "p", "c", withGroup("Workers_1", medium)),
			"node group names must be at most 40 lowercase alphanumeric"},
		{"port zero", newPlane(ns, "p", "c", withService("postgres", 0)),
			"spec.serviceAccess[0].ports[0].port: Invalid value: 0: spec.serviceAccess[0].ports[0].port in body should be greater than or equal to 1"},
		{"port above 65535", newPlane(ns, "p", "c", withService("postgres", 70000)),
			"should be less than or equal to 65535"},
		{"service without ports", newPlane(ns, "p", "c", withService("postgres")),
			"spec.serviceAccess[0].ports: Required value"},
		{"malformed service name", newPlane(ns, "p", "c", withService("Postgres.DB", 5432)),
			"spec.serviceAccess[0].name in body should match"},
		{"system placement namespace", newPlane(ns, "p", "c", func(p *cpv1.ComputePlane) {
			p.Spec.PlacementNamespaces = []string{"kube-system"}
		}), "placementNamespaces may not name default, kube-* or computeplane-* system namespaces"},
		{"operator placement namespace", newPlane(ns, "p", "c", func(p *cpv1.ComputePlane) {
			p.Spec.PlacementNamespaces = []string{"computeplane-system"}
		}), "placementNamespaces may not name default, kube-* or computeplane-* system namespaces"},
		{"missing class name", newPlane(ns, "p", ""), "spec.className in body should be at least 1 chars long"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := k8s.Create(ctx, tc.plane.DeepCopy())
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestAdmissionRejectsClassFieldsOnPlane: a tenant cannot set the class's posture through
// its own object; the apiserver refuses the unknown field instead of dropping it.
func TestAdmissionRejectsClassFieldsOnPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenantNamespace(t, ctx)
	for _, field := range []string{"podSecurity", "egress", "kubernetesVersion"} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": cpv1.GroupVersion.String(), "kind": "ComputePlane",
			"metadata": map[string]any{"namespace": ns, "name": "p"},
			"spec":     map[string]any{"className": "c", field: map[string]any{"level": "privileged"}},
		}}
		err := k8s.Create(ctx, u, client.FieldValidation("Strict"))
		if err == nil || !strings.Contains(err.Error(), `unknown field "spec.`+field+`"`) {
			t.Errorf("spec.%s: got %v, want an unknown field error", field, err)
		}
	}
}

// TestAdmissionOnePlanePerNamespace: the webhook refuses a second plane, naming the first.
func TestAdmissionOnePlanePerNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenantNamespace(t, ctx)
	if err := k8s.Create(ctx, newPlane(ns, "first", "c")); err != nil {
		t.Fatal(err)
	}
	err := k8s.Create(ctx, newPlane(ns, "second", "c"))
	want := `namespace "` + ns + `" already has ComputePlane "first": at most one ComputePlane per namespace is allowed`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second plane: got %v, want %q", err, want)
	}
	// Another namespace is unaffected.
	if err := k8s.Create(ctx, newPlane(tenantNamespace(t, ctx), "second", "c")); err != nil {
		t.Fatalf("a plane in another namespace was refused: %v", err)
	}
}

// TestAdmissionImmutableClassName: moving a plane to another class is refused.
func TestAdmissionImmutableClassName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenantNamespace(t, ctx)
	p := newPlane(ns, "p", "small")
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	// A merge patch, not an update: the controller may have added its finalizer since.
	patch := client.MergeFrom(p.DeepCopy())
	p.Spec.ClassName = "large"
	err := k8s.Patch(ctx, p, patch)
	if err == nil || !strings.Contains(err.Error(), "className is immutable") {
		t.Fatalf("got %v, want className is immutable", err)
	}
}

// TestAdmissionRejectsBadClasses checks the class's own rules.
func TestAdmissionRejectsBadClasses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cases := []struct {
		name string
		mut  classOpt
		want string
	}{
		{"no CNI", func(c *cpv1.ComputePlaneClass) { c.Spec.Addons[0].Role = cpv1.AddonRoleIngress },
			"exactly one add-on must have role CNI"},
		{"two CNIs", func(c *cpv1.ComputePlaneClass) {
			c.Spec.Addons = append(c.Spec.Addons, c.Spec.Addons[0])
			c.Spec.Addons[1].Name = "calico"
		}, "exactly one add-on must have role CNI"},
		{"malformed version", func(c *cpv1.ComputePlaneClass) { c.Spec.KubernetesVersion = "1.33" },
			"spec.kubernetesVersion in body should match"},
		{"unknown pod security level", func(c *cpv1.ComputePlaneClass) { c.Spec.PodSecurity.Level = "lenient" },
			`spec.podSecurity.level: Unsupported value: "lenient"`},
		{"malformed GPU device", func(c *cpv1.ComputePlaneClass) {
			c.Spec.NodeGroups.GPUs = []cpv1.GPULimit{{DeviceName: "a10"}}
		}, "spec.nodeGroups.gpus[0].deviceName in body should match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := k8s.Create(ctx, newClass("bad-"+rand.String(6), tc.mut))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}

	// Defaults fill the posture, and the placement is immutable once set.
	c := newClass("good-" + rand.String(6))
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.PodSecurity.Level != cpv1.PodSecurityRestricted || c.Spec.Egress.Internet != cpv1.InternetDeny ||
		c.Spec.Infrastructure.Placement != cpv1.DedicatedNamespace {
		t.Errorf("defaults not applied: podSecurity=%q internet=%q placement=%q",
			c.Spec.PodSecurity.Level, c.Spec.Egress.Internet, c.Spec.Infrastructure.Placement)
	}
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Infrastructure.NamespacePrefix = "plane-"
	if err := k8s.Patch(ctx, c, patch); err == nil || !strings.Contains(err.Error(), "are immutable") {
		t.Errorf("changing the namespace prefix: got %v, want it immutable", err)
	}
}
