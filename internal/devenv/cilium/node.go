package cilium

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/internal/devenv/hostproc"
	"github.com/cozystack/computeplane/internal/devenv/netns"
)

// The node's addresses: its veth to the host in HostCIDR (host .1, node .2), its pods in
// PodCIDR (the Node's spec.podCIDR, from which the agent's kubernetes IPAM allocates).
const (
	NodeName  = "computeplane-mgmt-node"
	HostIP    = "10.250.0.1"
	NodeIP    = "10.250.0.2"
	PodCIDR   = "10.253.0.0/24"
	nodeNetns = "computeplane-mgmt-node"
	hostIf    = "cpmgmt"
	// metricsPort is the agent's Prometheus endpoint, on NodeIP.
	metricsPort = 9962
)

// Options shape a Node.
type Options struct {
	// Dir holds the agent's state, the node's logs and kubeconfig.
	Dir string
	// Binaries is test/tools/cilium.sh's output: cilium-agent, cilium-cni, lib/bpf.
	Binaries string
	// KubeBinaries is test/tools/build.sh's output (kube-controller-manager).
	KubeBinaries string
	// Client is an administrator of the management cluster (Nodes, Pods, Services).
	Client client.Client
	// Kubeconfig is an administrator's kubeconfig of the management cluster, whose server
	// the host's processes reach; the agent, inside the node, reaches the apiserver at
	// APIServer instead.
	Kubeconfig []byte
	// APIServer is host:port of the management apiserver as the node reaches it (it
	// listens on the host's side of the node's veth, HostIP); its serving certificate
	// covers ServerName.
	APIServer, ServerName string
}

// Node is the running node.
type Node struct {
	o     Options
	lock  *os.File
	agent *hostproc.Process
	kcm   *hostproc.Process
	sock  string

	mu   sync.Mutex
	pods map[string]*Pod // by namespace/name
}

// Requirements are the host commands the node needs besides the VMs' (Debian: clang and
// llvm compile the datapath; iproute2 and iptables the agent drives).
var Requirements = []string{"ip", "iptables", "clang", "llc", "mount", "nsenter"}

// ErrUnsupported says this machine cannot run the node.
var ErrUnsupported = errors.New("this machine cannot run the management node's Cilium")

// Start makes the node's namespace and link, its Node object, and starts the agent and
// the EndpointSlice controller; it returns once the agent is ready.
func Start(ctx context.Context, o Options) (_ *Node, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: namespaces, veths and BPF need root", ErrUnsupported)
	}
	for _, r := range Requirements {
		if _, err := exec.LookPath(r); err != nil {
			return nil, fmt.Errorf("%w: %s is missing (apt-get install clang llvm iproute2 iptables)", ErrUnsupported, r)
		}
	}
	for _, b := range []string{"cilium-agent", "cilium-cni", "lib/bpf/bpf_lxc.c"} {
		if _, err := os.Stat(filepath.Join(o.Binaries, b)); err != nil {
			return nil, fmt.Errorf("%w: %s is not built (test/tools/cilium.sh builds it)", ErrUnsupported, b)
		}
	}
	// One node per host: its namespace, link and addresses are fixed. Another package's
	// tests may hold it for a few minutes (go test runs packages side by side).
	lock, err := hostproc.Lock(nodeNetns, 10*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("another management node runs on this host: %w", err)
	}
	n := &Node{o: o, lock: lock, pods: map[string]*Pod{}, sock: filepath.Join(o.Dir, "run", "cilium.sock")}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	for _, d := range []string{"run", "state", "bpffs", "cgroupv2"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	n.destroyLink()
	sweepPods()
	if err := n.createLink(); err != nil {
		return nil, err
	}
	if err := n.registerNode(ctx); err != nil {
		return nil, err
	}
	if err := n.startAgent(ctx); err != nil {
		return nil, err
	}
	if err := n.startEndpointSlices(); err != nil {
		return nil, err
	}
	return n, nil
}

// createLink makes the node's namespace and its veth to the host, and routes the node's
// pod CIDR through it (the host reaches the pods, and they it, as across a node's
// network).
func (n *Node) createLink() error {
	return nodeLink.Create(
		[]string{"ip", "route", "replace", PodCIDR, "via", NodeIP},
		[]string{"ip", "netns", "exec", nodeNetns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		[]string{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
	)
}

// nodeLink is the node's namespace and its veth to the host.
var nodeLink = netns.Link{Name: nodeNetns, HostIf: hostIf, HostIP: HostIP, IP: NodeIP, Prefix: 24}

// sweepPods removes the pod namespaces a crashed run left (the node's lock is held, so no
// live node's pods have them).
func sweepPods() {
	left, _ := filepath.Glob("/run/netns/" + podNetnsPrefix + "*")
	for _, p := range left {
		_ = exec.Command("ip", "netns", "del", filepath.Base(p)).Run()
	}
}

func (n *Node) destroyLink() {
	_ = exec.Command("ip", "route", "del", PodCIDR).Run()
	nodeLink.Destroy()
}

// registerNode writes the Node object as the kubelet registers it, with the pod CIDR a
// controller-manager's IPAM would give it.
func (n *Node) registerNode(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName, Labels: map[string]string{
		corev1.LabelHostname: NodeName, corev1.LabelOSStable: "linux",
	}}, Spec: corev1.NodeSpec{PodCIDR: PodCIDR, PodCIDRs: []string{PodCIDR}}}
	if err := n.o.Client.Create(ctx, node); apierrors.IsAlreadyExists(err) {
		// An earlier node's, on the same apiserver: this one takes it over.
		if err := n.o.Client.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return err
		}
		node.Spec.PodCIDR, node.Spec.PodCIDRs = PodCIDR, []string{PodCIDR}
		if err := n.o.Client.Update(ctx, node); err != nil {
			return fmt.Errorf("registering Node %s: %w", NodeName, err)
		}
	} else if err != nil {
		return fmt.Errorf("registering Node %s: %w", NodeName, err)
	}
	node.Status = corev1.NodeStatus{
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: NodeIP}, {Type: corev1.NodeHostName, Address: NodeName}},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
	}
	return n.o.Client.Status().Update(ctx, node)
}

// Close deletes the node's pods, stops the agent and removes the namespace, the link and
// the mounts.
func (n *Node) Close() {
	n.mu.Lock()
	pods := make([]*Pod, 0, len(n.pods))
	for _, p := range n.pods {
		pods = append(pods, p)
	}
	n.mu.Unlock()
	for _, p := range pods {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = p.Delete(ctx)
		cancel()
	}
	for _, p := range []*hostproc.Process{n.kcm, n.agent} {
		if p != nil {
			p.Stop(5 * time.Second)
		}
	}
	n.destroyLink()
	sweepPods()
	for _, d := range []string{"bpffs", "cgroupv2"} {
		_ = exec.Command("umount", "-l", filepath.Join(n.o.Dir, d)).Run()
	}
	if n.lock != nil {
		_ = n.lock.Close()
	}
}

// Netns is the node's network namespace (the node itself, its own address and no pod's,
// so no policy applies there): a control that shows a path exists.
func (n *Node) Netns() string { return nodeNetns }

// AgentLog is the end of the agent's log.
func (n *Node) AgentLog(lines int) string {
	if n.agent == nil {
		return ""
	}
	return n.agent.Tail(lines)
}
