package kamajireal_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/test/testkit"
)

// TestAutoscalerGrowsTheGroupUpToItsMax: an autoscaled group (min 1, max 2) starts with
// one real node; a pod too big for what is left on it stays pending until the
// cluster-autoscaler (the stand-in, acting as the Deployment the operator renders, with
// the identities the operator issues) scales the MachineDeployment, a second node joins
// and the pod runs there; a third such pod finds the group at its max: it stays pending,
// the group stays at two, and the pod is told why.
func TestAutoscalerGrowsTheGroupUpToItsMax(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	b := startBedWith(t, ctx, bedOptions{nodes: true})
	k8s := b.mgmt.Client

	created := time.Now()
	p := testkit.NewTenantPlane(t, ctx, k8s, b.class.Name, func(p *cpv1.ComputePlane) {
		p.Spec.NodeGroups = map[string]cpv1.NodeGroup{"workers": {MinReplicas: 1, MaxReplicas: 2, InstanceType: "u1.medium"}}
	})
	p, tcp, secret := b.readyPlaneNamed(t, ctx, p, created)
	plane := planeClient(t, secret.Data[render.AdminKubeconfigKey], tcp)
	testkit.Poll(t, 4*time.Minute, 200*time.Millisecond, func() error {
		if n := len(readyNodes(t, ctx, plane)); n != 1 {
			return fmt.Errorf("%d Ready nodes, want the group's minimum, 1; machines: %s", n, b.machines(ctx, p))
		}
		return plane.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: "default"}, &corev1.ServiceAccount{})
	})
	var first corev1.Node
	for n := range readyNodes(t, ctx, plane) {
		if err := plane.Get(ctx, client.ObjectKey{Name: n}, &first); err != nil {
			t.Fatal(err)
		}
	}
	// Three quarters of a node each: one fits a node, two do not.
	cpu := first.Status.Allocatable.Cpu().MilliValue() * 3 / 4
	big := func(name string) *corev1.Pod {
		pod := restrictedPod("notebooks", name, "sleep 3600")
		pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(cpu, resource.DecimalSI)}
		return pod
	}
	if err := plane.Create(ctx, big("a")); err != nil {
		t.Fatal(err)
	}
	running(t, ctx, plane, "a", time.Minute)

	pending := time.Now()
	if err := plane.Create(ctx, big("b")); err != nil {
		t.Fatal(err)
	}
	md := &clusterv1.MachineDeployment{}
	mdKey := client.ObjectKey{Namespace: p.Status.InfrastructureNamespace, Name: render.MachineDeploymentName(p, "workers")}
	testkit.Poll(t, time.Minute, 200*time.Millisecond, func() error {
		if err := k8s.Get(ctx, mdKey, md); err != nil {
			return err
		}
		if md.Spec.Replicas == nil || *md.Spec.Replicas != 2 {
			return fmt.Errorf("the group's replicas %d, want 2 for the pending pod; events: %s; %v", ptr.Deref(md.Spec.Replicas, 0), podEvents(ctx, plane, "b"), b.autoscalerErr.Load())
		}
		return nil
	})
	t.Logf("pod pending → the autoscaler scaled the group to 2: %s", time.Since(pending).Round(time.Millisecond))
	if got := podEvents(ctx, plane, "b"); !strings.Contains(got, "TriggeredScaleUp: pod triggered scale-up: [{MachineDeployment/"+mdKey.Namespace+"/"+mdKey.Name+" 1->2 (max: 2)}]") {
		t.Errorf("pod b was not told of its scale-up: %s", got)
	}
	running(t, ctx, plane, "b", 3*time.Minute)
	t.Logf("pod pending → Running on the new node: %s", time.Since(pending).Round(time.Millisecond))
	if n := len(readyNodes(t, ctx, plane)); n != 2 {
		t.Errorf("%d Ready nodes, want 2", n)
	}

	// At its max the group grows no more: the pod stays pending, and says why.
	if err := plane.Create(ctx, big("c")); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, time.Minute, 200*time.Millisecond, func() error {
		if got := podEvents(ctx, plane, "c"); !strings.Contains(got, "NotTriggerScaleUp: pod didn't trigger scale-up: 1 max node group size reached") {
			return fmt.Errorf("pod c not told the group is at its max: %s", got)
		}
		return nil
	})
	if err := k8s.Get(ctx, mdKey, md); err != nil {
		t.Fatal(err)
	}
	if *md.Spec.Replicas != 2 {
		t.Errorf("the group at its max was scaled to %d", *md.Spec.Replicas)
	}
	got := &corev1.Pod{}
	if err := plane.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: "c"}, got); err != nil || got.Spec.NodeName != "" {
		t.Errorf("pod c is on %q (%v), want pending", got.Spec.NodeName, err)
	}

	deletePlane(t, ctx, k8s, p)
	testkit.Poll(t, 3*time.Minute, 200*time.Millisecond, func() error {
		if names := b.vms.Names(); len(names) > 0 {
			return fmt.Errorf("VMs still running: %v", names)
		}
		return nil
	})
}

// running waits until the pod runs.
func running(t *testing.T, ctx context.Context, plane client.Client, name string, timeout time.Duration) {
	t.Helper()
	testkit.Poll(t, timeout, 200*time.Millisecond, func() error {
		got := &corev1.Pod{}
		if err := plane.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: name}, got); err != nil {
			return err
		}
		if got.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s on %q: %s %v; events: %s", name, got.Spec.NodeName, got.Status.Phase, got.Status.Conditions, podEvents(ctx, plane, name))
		}
		return nil
	})
}

// podEvents are the plane's events about a pod of notebooks, "reason: message; ...".
func podEvents(ctx context.Context, plane client.Client, name string) string {
	var list corev1.EventList
	if err := plane.List(ctx, &list, client.InNamespace("notebooks")); err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == name {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return strings.Join(out, "; ")
}
