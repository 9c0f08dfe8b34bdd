package kamajireal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/internal/devenv/vm"
	"github.com/cozystack/computeplane/test/testkit"
)

// startNodes starts Cluster API's real managers and the VM host, its VMs in pods of the
// management node (startCilium); it skips when this machine cannot run VMs (not root,
// or containerd and the rest not installed).
func (b *bed) startNodes(t *testing.T, ctx context.Context, capiBin string) {
	t.Helper()
	dns, err := b.node.ServeClusterDNS(ctx, b.serviceIP)
	if err != nil {
		t.Fatal(err)
	}
	host, err := vm.NewHost(vm.Options{Dir: t.TempDir(), Binaries: os.Getenv("KUBEBUILDER_ASSETS"), PodNetwork: b.node.VMs(dns)})
	if errors.Is(err, vm.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b.vms = host
	t.Cleanup(func() {
		for _, n := range host.Names() {
			if v, ok := host.Get(n); ok && t.Failed() {
				t.Logf("VM %s:\n%s", n, v.Log(40))
			}
		}
		if err := host.Close(); err != nil {
			t.Errorf("powering the VMs off: %v", err)
		}
	})
	dir := filepath.Join(t.TempDir(), "cluster-api")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if b.capi, err = devenv.StartClusterAPI(ctx, b.mgmt, devenv.ClusterAPIOptions{Binaries: capiBin, Dir: dir, Proxy: proxy}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Cluster API's managers:\n%s", b.capi.LogTail(40))
		}
		b.capi.Stop()
	})
}

// serviceIP is the management cluster's DNS for the VMs: a Service's ClusterIP.
func (b *bed) serviceIP(service, namespace string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	svc := &corev1.Service{}
	if err := b.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: service}, svc); err != nil || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return "", false
	}
	return svc.Spec.ClusterIP, true
}

// TestNodeJoinsThePlane: a node group of one becomes a real node of the plane through
// the real chain: the operator's MachineDeployment, Cluster API's MachineSet and Machine,
// the bootstrap data its kubeadm provider renders from the operator's
// KubeadmConfigTemplate, a VM that runs it (kubeadm join, the kubelet's TLS bootstrap),
// a Node Ready in the plane with the group's labels and roles, and a pod Running on it.
// Deleting the plane deletes the VM: no process of the node is left.
func TestNodeJoinsThePlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	b := startBedWith(t, ctx, bedOptions{nodes: true})
	k8s := b.mgmt.Client

	created := time.Now()
	p := testkit.NewTenantPlane(t, ctx, k8s, b.class.Name, func(p *cpv1.ComputePlane) {
		p.Spec.NodeGroups = map[string]cpv1.NodeGroup{"workers": {MinReplicas: 1, MaxReplicas: 1, InstanceType: "u1.medium", Roles: []string{"worker"}}}
	})
	p, tcp, secret := b.readyPlaneNamed(t, ctx, p, created)
	plane := planeClient(t, secret.Data[render.AdminKubeconfigKey], tcp)

	var node corev1.Node
	testkit.Poll(t, 4*time.Minute, 200*time.Millisecond, func() error {
		if err := b.capi.Alive(); err != nil {
			t.Fatal(err)
		}
		var nodes corev1.NodeList
		if err := plane.List(ctx, &nodes); err != nil {
			return err
		}
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					node = n
					return nil
				}
			}
		}
		return fmt.Errorf("no Ready node in the plane yet (%d nodes); machines: %s", len(nodes.Items), b.machines(ctx, p))
	})
	t.Logf("ComputePlane created → first Node Ready in the plane: %s", time.Since(created).Round(time.Millisecond))

	if got := node.Labels[cpv1.NodeGroupLabel]; got != "workers" {
		t.Errorf("node %s: group label %q, want workers (labels %v)", node.Name, got, node.Labels)
	}
	testkit.Poll(t, time.Minute, 200*time.Millisecond, func() error {
		got := &corev1.Node{}
		if err := plane.Get(ctx, client.ObjectKey{Name: node.Name}, got); err != nil {
			return err
		}
		if _, ok := got.Labels[render.NodeRoleLabelPrefix+"/worker"]; !ok {
			return fmt.Errorf("node %s has no worker role label (Cluster API syncs it from the Machine): %v", got.Name, got.Labels)
		}
		if got.Spec.ProviderID != "kubevirt://"+node.Name {
			return fmt.Errorf("node %s: provider ID %q", got.Name, got.Spec.ProviderID)
		}
		return nil
	})
	testkit.Poll(t, time.Minute, 200*time.Millisecond, func() error {
		var machines clusterv1.MachineList
		if err := k8s.List(ctx, &machines, client.InNamespace(p.Status.InfrastructureNamespace)); err != nil {
			return err
		}
		if len(machines.Items) != 1 || machines.Items[0].Status.NodeRef.Name != node.Name {
			return fmt.Errorf("machines: %s", b.machines(ctx, p))
		}
		return nil
	})

	// A pod that conforms to the plane's restricted profile runs on the node.
	testkit.Poll(t, time.Minute, 100*time.Millisecond, func() error {
		return plane.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: "default"}, &corev1.ServiceAccount{})
	})
	pod := restrictedPod("notebooks", "hello", "echo hello from $(hostname); sleep 3600")
	podCreated := time.Now()
	if err := plane.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 2*time.Minute, 100*time.Millisecond, func() error {
		got := &corev1.Pod{}
		if err := plane.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return err
		}
		if got.Status.Phase != corev1.PodRunning || got.Spec.NodeName != node.Name {
			return fmt.Errorf("pod %s on %q: %s %v", got.Name, got.Spec.NodeName, got.Status.Phase, got.Status.Conditions)
		}
		return nil
	})
	t.Logf("pod created → Running on the plane's node: %s", time.Since(podCreated).Round(time.Millisecond))

	// A placement release's pods run on the node: the real Flux installs the chart into
	// the plane as the deployer, and the plane schedules and runs its Deployment.
	placed := time.Now()
	web := placementRelease(p.Namespace, "web", "web")
	if err := k8s.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 2*time.Minute, 200*time.Millisecond, func() error {
		var pods corev1.PodList
		if err := plane.List(ctx, &pods, client.InNamespace("notebooks"), client.MatchingLabels{"app": "web"}); err != nil {
			return err
		}
		// Ready: its httpd answered the kubelet's probe, over the VM's pod network.
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Spec.NodeName == node.Name {
					return nil
				}
			}
		}
		return fmt.Errorf("no Ready pod of the release on %s yet: %s", node.Name, releaseState(ctx, k8s, web))
	})
	t.Logf("placement release created → its pod Ready on the plane's node: %s", time.Since(placed).Round(time.Millisecond))

	// A chart whose pod runs as root is refused by the plane's Pod Security, and the
	// release says so in Pod Security's own words.
	root := placementRelease(p.Namespace, "root", "root")
	if err := k8s.Create(ctx, root); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 2*time.Minute, 200*time.Millisecond, func() error {
		if state := releaseState(ctx, k8s, root); !strings.Contains(state, `violates PodSecurity "restricted:`) {
			return fmt.Errorf("the release does not report Pod Security's refusal: %s", state)
		}
		return nil
	})
	if err := plane.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: "root"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("the root pod is in the plane (err=%v)", err)
	}

	// A node whose kubelet dies for good is remediated: the plane marks it NotReady,
	// Cluster API's MachineHealthCheck (the operator's) deletes its Machine, the VM goes,
	// and the MachineSet's new Machine boots a VM that joins as a new Node.
	v, ok := b.vms.Get(node.Name)
	if !ok {
		t.Fatalf("no VM named %s (VMs: %v)", node.Name, b.vms.Names())
	}
	killed := time.Now()
	v.KillKubelet()
	testkit.Poll(t, 4*time.Minute, time.Second, func() error {
		if _, ok := b.vms.Get(node.Name); ok {
			return fmt.Errorf("the VM of %s still runs; machines: %s", node.Name, b.machines(ctx, p))
		}
		var nodes corev1.NodeList
		if err := plane.List(ctx, &nodes); err != nil {
			return err
		}
		for _, n := range nodes.Items {
			if n.Name == node.Name {
				continue
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && n.Labels[cpv1.NodeGroupLabel] == "workers" {
					return nil
				}
			}
		}
		return fmt.Errorf("no replacement node Ready yet; machines: %s", b.machines(ctx, p))
	})
	t.Logf("kubelet killed → Machine remediated and a new Node Ready: %s", time.Since(killed).Round(time.Millisecond))

	// A change of the group's machine (its instance type) rolls its nodes: the operator
	// renders a new KubevirtMachineTemplate, Cluster API's rollout brings up a Machine of
	// it, whose VM joins, then deletes the old one.
	old := readyNodes(t, ctx, plane)
	rolled := time.Now()
	patch := client.MergeFrom(p.DeepCopy())
	g := p.Spec.NodeGroups["workers"]
	g.InstanceType = "u1.large"
	p.Spec.NodeGroups["workers"] = g
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 4*time.Minute, time.Second, func() error {
		var now []string
		for n := range readyNodes(t, ctx, plane) {
			now = append(now, n)
		}
		if len(now) != 1 || old[now[0]] {
			return fmt.Errorf("Ready nodes %v (before the change %v); machines: %s", now, old, b.machines(ctx, p))
		}
		if names := b.vms.Names(); len(names) != 1 || names[0] != now[0] {
			return fmt.Errorf("VMs %v, want only %s's", names, now[0])
		}
		return nil
	})
	t.Logf("instance type changed → the group's node replaced by one of the new template: %s", time.Since(rolled).Round(time.Millisecond))

	// Deleting the plane deletes its machines, and with them its VM.
	deletePlane(t, ctx, k8s, p)
	testkit.Poll(t, 3*time.Minute, 200*time.Millisecond, func() error {
		if names := b.vms.Names(); len(names) > 0 {
			return fmt.Errorf("VMs still running: %v; machines: %s", names, b.machines(ctx, p))
		}
		return nil
	})
	// Nothing of the nodes is left on the host: no network namespace, no cgroup (and so
	// no process: each VM's processes and its pods' are under its cgroup).
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil || strings.Contains(string(out), "computeplane-vm-") {
		t.Errorf("network namespaces left (%v): %s", err, out)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/computeplane-vm-*"); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
}

// deletePlane deletes the plane as its owner does, with its placement releases
// uninstalled.
func deletePlane(t *testing.T, ctx context.Context, k8s client.Client, p *cpv1.ComputePlane) {
	t.Helper()
	patch := client.MergeFrom(p.DeepCopy())
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, cpv1.UninstallAnnotation, "the test is done with it")
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// readyNodes are the names of the plane's Ready nodes.
func readyNodes(t *testing.T, ctx context.Context, plane client.Client) map[string]bool {
	t.Helper()
	var nodes corev1.NodeList
	if err := plane.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				out[n.Name] = true
			}
		}
	}
	return out
}

// rootPodManifest is the suite's chart of a pod that runs as root (startBedWith serves
// it, with devenv.WebChart).
const rootPodManifest = `apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}
spec:
  containers:
  - name: root
    image: ` + vm.BusyboxImage + `
    command: ["/bin/sleep", "3600"]
    securityContext: {runAsUser: 0}
`

// placementRelease is a HelmRelease of one of the suite's charts placed into the plane.
func placementRelease(ns, name, chart string) *helmv2.HelmRelease {
	return &helmv2.HelmRelease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{cpv1.PlacementLabel: cpv1.PlacementLabelValue}},
		Spec: helmv2.HelmReleaseSpec{
			Interval: metav1.Duration{Duration: time.Minute}, ReleaseName: name, TargetNamespace: "notebooks",
			ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "ExternalArtifact", Name: chart, Namespace: chartsNamespace},
			Install:  &helmv2.Install{DisableWait: true}, Upgrade: &helmv2.Upgrade{DisableWait: true},
		},
	}
}

// releaseState is a release's Ready condition, for assertions and failure messages.
func releaseState(ctx context.Context, c client.Client, hr *helmv2.HelmRelease) string {
	got := &helmv2.HelmRelease{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(hr), got); err != nil {
		return err.Error()
	}
	for _, cond := range got.Status.Conditions {
		if cond.Type == meta.ReadyCondition {
			return fmt.Sprintf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
		}
	}
	return "no Ready condition"
}

// restrictedPod is a busybox pod that Pod Security's restricted profile admits.
func restrictedPod(ns, name, script string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
		// The shell is PID 1 and ignores SIGTERM: a drain would wait out the default 30 s.
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers: []corev1.Container{{Name: name, Image: vm.BusyboxImage, Command: []string{"/bin/sh", "-c", script},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534),
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}}},
	}}
}

// machines describes the plane's Machines, for failure messages.
func (b *bed) machines(ctx context.Context, p *cpv1.ComputePlane) string {
	var list clusterv1.MachineList
	if err := b.mgmt.Client.List(ctx, &list, client.InNamespace(p.Status.InfrastructureNamespace)); err != nil {
		return err.Error()
	}
	out := ""
	for _, m := range list.Items {
		out += fmt.Sprintf("[%s phase=%s bootstrap=%v node=%q] ", m.Name, m.Status.Phase, ptr.Deref(m.Spec.Bootstrap.DataSecretName, ""), m.Status.NodeRef.Name)
	}
	if out == "" {
		return "none"
	}
	return out
}
