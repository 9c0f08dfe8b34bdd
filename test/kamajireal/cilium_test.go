package kamajireal_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/internal/devenv/cilium"
	"github.com/cozystack/computeplane/internal/devenv/netns"
	"github.com/cozystack/computeplane/test/testkit"
)

// startCilium starts the management node with its real cilium-agent, the control-plane
// pods on it, and the world outside the cluster; it skips when this machine cannot.
func (b *bed) startCilium(t *testing.T, ctx context.Context, bin string) {
	t.Helper()
	node, err := devenv.StartCiliumNode(ctx, b.mgmt, bin, filepath.Join(t.TempDir(), "node"))
	if errors.Is(err, cilium.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b.node = node
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cilium-agent's last log lines:\n%s", node.AgentLog(60))
		}
		node.Close()
	})
	if b.world, err = cilium.StartWorld(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.world.Close)
	b.cp = devenv.StartControlPlanePods(ctx, b.mgmt.Client, node, proxy)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control-plane pods: %s", b.cp.Errors())
		}
		b.cp.Stop()
	})
}

// TestCiliumPolicesThePlanesNodes: the plane's node is a VM in a virt-launcher pod of a
// management node whose real cilium-agent enforces the operator's policies; from inside
// that node, with real connections, the plane's own control plane and the cluster DNS
// are reachable (it joined through them), a granted Service on its granted port only,
// and nothing else: not the management kube-apiserver (by the deny rule: the agent
// counts the drop as the denylist's), not the node, not another namespace's pod, not an
// address outside the cluster under internet: Deny. Each refusal is a dropped packet
// the agent counts as a policy drop, and each refused address answers a pod of the same
// node that no policy selects, so the path exists and only the policy stands in it. When the class
// opens the internet the world answers and the management kube-apiserver is still
// refused by its deny rule. Revoking the grant closes the Service.
func TestCiliumPolicesThePlanesNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	b := startBedWith(t, ctx, bedOptions{nodes: true})
	k8s := b.mgmt.Client

	created := time.Now()
	p := testkit.NewTenantPlane(t, ctx, k8s, b.class.Name, func(p *cpv1.ComputePlane) {
		p.Spec.NodeGroups = map[string]cpv1.NodeGroup{"workers": {MinReplicas: 1, MaxReplicas: 1, InstanceType: "u1.medium", Roles: []string{"worker"}}}
		p.Spec.ServiceAccess = []cpv1.ServiceAccess{{Name: "files", Ports: []cpv1.ServicePort{{Port: 80, Protocol: "TCP"}}}}
	})
	// The granted Service: pods of the tenant's namespace on the management node,
	// answering on two ports, of which the plane asks for one.
	files := b.backend(t, ctx, p.Namespace, "files", map[string]string{cpv1.ServiceAccessLabel: p.Name})
	// Someone else's Service, which the plane never asked for.
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}}
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	secrets := b.backend(t, ctx, other.Name, "secrets", nil)
	// A pod of the same node that no policy selects: every address the plane's node is
	// refused must answer it, so the path (and Cilium's Service translation) exists and
	// only the policy stands in the way.
	free, err := b.node.RunPod(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: other.Name, Name: "probe", Labels: map[string]string{"app": "probe"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctl := free.Netns()

	p, tcp, secret := b.readyPlaneNamed(t, ctx, p, created)
	plane := planeClient(t, secret.Data[render.AdminKubeconfigKey], tcp)
	var node string
	testkit.Poll(t, 4*time.Minute, 200*time.Millisecond, func() error {
		for n := range readyNodes(t, ctx, plane) {
			node = n
			return nil
		}
		return fmt.Errorf("no Ready node in the plane yet; machines: %s; control-plane pods: %s", b.machines(ctx, p), b.cp.Errors())
	})
	t.Logf("ComputePlane created → its node Ready, joined through Cilium: %s", time.Since(created).Round(time.Millisecond))
	v, ok := b.vms.Get(node)
	if !ok {
		t.Fatalf("no VM named %s (VMs: %v)", node, b.vms.Names())
	}
	in := v.Netns()

	// Reachable: the cluster DNS, which resolves the plane's control plane...
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return netns.Dial(ctx, in, network, net.JoinHostPort(cilium.ClusterDNSIP, "53"), 2*time.Second)
	}}
	cpName := tcp.Name + "." + tcp.Namespace + ".svc.cluster.local"
	addrs, err := r.LookupHost(ctx, cpName)
	if err != nil || len(addrs) == 0 {
		t.Fatalf("from the node, %s does not resolve: %v %v", cpName, addrs, err)
	}
	// ... and the control plane at that address.
	if _, err := cilium.Reach(ctx, in, net.JoinHostPort(addrs[0], "6443")); err != nil {
		t.Errorf("from the node, its control plane %s:6443: %v", addrs[0], err)
	}
	// The granted port of the granted Service.
	filesIP := b.clusterIP(t, ctx, files)
	testkit.Poll(t, time.Minute, 200*time.Millisecond, func() error {
		got, err := cilium.Reach(ctx, in, net.JoinHostPort(filesIP, "80"))
		if err != nil || got != "files:8080" {
			return fmt.Errorf("the granted Service %s:80 answered %q, %v", filesIP, got, err)
		}
		return nil
	})

	// Refused, each by policy, each answering the unpoliced pod.
	apiserver, err := url.Parse(b.mgmt.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	b.refused(t, ctx, in, ctl, "the management kube-apiserver", net.JoinHostPort(cilium.HostIP, apiserver.Port()), cilium.DropDenylist, "")
	b.refused(t, ctx, in, ctl, "the management kube-apiserver's Service", "10.0.0.1:443", cilium.DropDenylist, "")
	b.refused(t, ctx, in, ctl, "an address outside the cluster (internet: Deny)", cilium.WorldAddr, cilium.DropPolicyDenied, cilium.WorldBanner)
	b.refused(t, ctx, in, ctl, "another namespace's Service", net.JoinHostPort(b.clusterIP(t, ctx, secrets), "80"), cilium.DropPolicyDenied, "secrets:8080")
	b.refused(t, ctx, in, ctl, "the granted Service's other port", net.JoinHostPort(filesIP, "81"), cilium.DropPolicyDenied, "files:8081")
	b.refused(t, ctx, in, ctl, "the management node itself", net.JoinHostPort(cilium.NodeIP, "9962"), cilium.DropPolicyDenied, "")

	// The class opens the internet: the world answers, and the management kube-apiserver,
	// outside the cluster like the world, is still refused by its deny rule.
	opened := time.Now()
	classPatch := client.MergeFrom(b.class.DeepCopy())
	b.class.Spec.Egress.Internet = cpv1.InternetAllow
	if err := k8s.Patch(ctx, b.class, classPatch); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, time.Minute, 200*time.Millisecond, func() error {
		if got, err := cilium.Reach(ctx, in, cilium.WorldAddr); err != nil || got != cilium.WorldBanner {
			return fmt.Errorf("under internet: Allow the world answered %q, %v", got, err)
		}
		return nil
	})
	t.Logf("class set to internet: Allow → the world reachable from the node: %s", time.Since(opened).Round(time.Millisecond))
	b.refused(t, ctx, in, ctl, "the management kube-apiserver under internet: Allow", net.JoinHostPort(cilium.HostIP, apiserver.Port()), cilium.DropDenylist, "")
	b.refused(t, ctx, in, ctl, "another namespace's Service under internet: Allow", net.JoinHostPort(b.clusterIP(t, ctx, secrets), "80"), cilium.DropPolicyDenied, "secrets:8080")

	// The grant goes: the Service's owner removes its opt-in label.
	revoked := time.Now()
	patch := client.MergeFrom(files.DeepCopy())
	delete(files.Labels, cpv1.ServiceAccessLabel)
	if err := k8s.Patch(ctx, files, patch); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, time.Minute, 100*time.Millisecond, func() error {
		if got, err := cilium.Reach(ctx, in, net.JoinHostPort(filesIP, "80")); err == nil {
			return fmt.Errorf("the revoked Service still answers: %q", got)
		}
		return nil
	})
	t.Logf("grant revoked → the Service unreachable from the node: %s", time.Since(revoked).Round(time.Millisecond))
	b.refused(t, ctx, in, ctl, "the revoked Service", net.JoinHostPort(filesIP, "80"), cilium.DropPolicyDenied, "files:8080")

	// Deleting the plane deletes its VM, the VM's pod and its control plane's: no pod or
	// endpoint of it is left on the management node.
	infra := p.Status.InfrastructureNamespace
	deletePlane(t, ctx, k8s, p)
	testkit.Poll(t, 3*time.Minute, 200*time.Millisecond, func() error {
		if names := b.vms.Names(); len(names) > 0 {
			return fmt.Errorf("VMs still running: %v", names)
		}
		// Neither the VM's pod nor the control plane's (gone with Kamaji's Deployment).
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(infra)); err != nil {
			return err
		}
		var eps ciliumv2.CiliumEndpointList
		if err := k8s.List(ctx, &eps, client.InNamespace(infra)); err != nil {
			return err
		}
		if len(pods.Items) > 0 || len(eps.Items) > 0 {
			return fmt.Errorf("%d pods and %d Cilium endpoints left in %s", len(pods.Items), len(eps.Items), infra)
		}
		return nil
	})
}

// backend is a Service of namespace ns with pods on the management node answering on
// port 8080 ("<name>:8080") behind Service port 80, and on 8081 behind 81.
func (b *bed) backend(t *testing.T, ctx context.Context, ns, name string, labels map[string]string) *corev1.Service {
	t.Helper()
	sel := map[string]string{"app": name}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: corev1.ServiceSpec{
		Selector: sel, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
			{Name: "admin", Port: 81, TargetPort: intstr.FromInt32(8081), Protocol: corev1.ProtocolTCP},
		}}}
	if err := b.mgmt.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	pod, err := b.node.RunPod(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-0", Labels: sel},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "computeplane.invalid/" + name,
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 8081}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{8080, 8081} {
		if err := pod.Listen(port, fmt.Sprintf("%s:%d", name, port)); err != nil {
			t.Fatal(err)
		}
	}
	return svc
}

func (b *bed) clusterIP(t *testing.T, ctx context.Context, svc *corev1.Service) string {
	t.Helper()
	got := &corev1.Service{}
	if err := b.mgmt.Client.Get(ctx, client.ObjectKeyFromObject(svc), got); err != nil {
		t.Fatal(err)
	}
	return got.Spec.ClusterIP
}

// refused checks that addr cannot be reached from inside the namespace in, for the reason
// named (cilium.CheckRefused: a dropped packet, counted by the agent as such), and that it
// answers from the namespace control, a pod no policy selects ("" connects; anything else
// is the banner it must read): the path exists, only the policy stands in it.
func (b *bed) refused(t *testing.T, ctx context.Context, in, control, what, addr, reason, banner string) {
	t.Helper()
	got, err := cilium.Reach(ctx, control, addr)
	if err != nil || (banner != "" && got != banner) {
		t.Errorf("%s (%s) does not answer a pod no policy selects (%q, %v): its refusal would prove nothing", what, addr, got, err)
		return
	}
	if _, _, err := b.node.CheckRefused(ctx, in, addr, reason); err != nil {
		t.Errorf("from the plane's node, %s: %v", what, err)
	}
}
