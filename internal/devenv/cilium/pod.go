package cilium

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/internal/devenv/hostproc"
)

// Pod is one of the node's pods: a Pod object bound to the node, and the network
// namespace Cilium's CNI plugin plumbed for it.
type Pod struct {
	node        *Node
	key         client.ObjectKey
	netns       string
	ownNetns    bool // made by RunPod, removed with the pod
	containerID string
	ip          string

	mu      sync.Mutex
	closers []io.Closer
	deleted bool
}

// IP is the pod's address.
func (p *Pod) IP() string { return p.ip }

// Netns is the name of the pod's network namespace.
func (p *Pod) Netns() string { return p.netns }

// Serve ties c (a listener opened in the pod's namespace, say) to the pod: it is closed
// when the pod is deleted.
func (p *Pod) Serve(c io.Closer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closers = append(p.closers, c)
}

// podNetnsPrefix names the namespaces RunPod makes.
const podNetnsPrefix = "computeplane-pod-"

// RunPod makes the pod in a network namespace of its own.
func (n *Node) RunPod(ctx context.Context, pod *corev1.Pod) (*Pod, error) {
	sum := sha256.Sum256([]byte(pod.Namespace + "/" + pod.Name))
	name := podNetnsPrefix + hex.EncodeToString(sum[:])[:10]
	_ = exec.Command("ip", "netns", "del", name).Run()
	for _, s := range [][]string{{"ip", "netns", "add", name}, {"ip", "-n", name, "link", "set", "lo", "up"}} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	p, err := n.AttachPod(ctx, pod, name)
	if err != nil {
		_ = exec.Command("ip", "netns", "del", name).Run()
		return nil, err
	}
	p.ownNetns = true
	return p, nil
}

// AttachPod makes the Pod object (bound to the node; an existing one is taken as it is)
// and plumbs the named network namespace as its network, through Cilium's CNI plugin as
// the container runtime calls it: the agent allocates the address, reads the pod's labels
// for its identity and enforces the policies that select it from then on. The pod's
// status is then written as its kubelet would (Running, Ready, its IP), so the
// EndpointSlice controller lists it behind its Services.
func (n *Node) AttachPod(ctx context.Context, pod *corev1.Pod, netns string) (*Pod, error) {
	key := client.ObjectKeyFromObject(pod)
	obj := pod.DeepCopy()
	obj.Spec.NodeName = NodeName
	if len(obj.Spec.Containers) == 0 {
		obj.Spec.Containers = []corev1.Container{{Name: "main", Image: "computeplane.invalid/stand-in"}}
	}
	if err := n.o.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating pod %s: %w", key, err)
	}
	if err := n.o.Client.Get(ctx, key, obj); err != nil {
		return nil, err
	}
	p := &Pod{node: n, key: key, netns: netns, containerID: "computeplane" + strings.ReplaceAll(string(obj.UID), "-", "")}
	out, err := n.cni(ctx, "ADD", p)
	if err != nil {
		_ = n.o.Client.Delete(context.WithoutCancel(ctx), obj)
		return nil, err
	}
	var result struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &result); err != nil || len(result.IPs) == 0 {
		_, _ = n.cni(context.WithoutCancel(ctx), "DEL", p)
		_ = n.o.Client.Delete(context.WithoutCancel(ctx), obj)
		return nil, fmt.Errorf("cilium-cni ADD for %s answered no address (%v): %s", key, err, out)
	}
	ip, _, err := net.ParseCIDR(result.IPs[0].Address)
	if err != nil {
		return nil, err
	}
	p.ip = ip.String()
	if err := n.reportRunning(ctx, obj, p.ip); err != nil {
		_ = p.Delete(context.WithoutCancel(ctx))
		return nil, err
	}
	n.mu.Lock()
	n.pods[key.String()] = p
	n.mu.Unlock()
	return p, nil
}

// reportRunning writes the pod's status as a kubelet would once its containers run.
func (n *Node) reportRunning(ctx context.Context, pod *corev1.Pod, ip string) error {
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, HostIP: NodeIP, HostIPs: []corev1.HostIP{{IP: NodeIP}},
		PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true, Started: ptrTrue(),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return n.o.Client.Status().Update(ctx, pod)
}

func ptrTrue() *bool { t := true; return &t }

// Delete removes the pod: what was tied to it, its interface (CNI DEL, so the agent
// forgets the endpoint), its namespace if RunPod made it, and its object.
func (p *Pod) Delete(ctx context.Context) error {
	p.mu.Lock()
	if p.deleted {
		p.mu.Unlock()
		return nil
	}
	p.deleted = true
	closers := p.closers
	p.closers = nil
	p.mu.Unlock()
	for _, c := range closers {
		_ = c.Close()
	}
	var errs []error
	if _, err := p.node.cni(ctx, "DEL", p); err != nil {
		errs = append(errs, err)
	}
	if p.ownNetns {
		_ = exec.Command("ip", "netns", "del", p.netns).Run()
	}
	obj := &corev1.Pod{}
	obj.Namespace, obj.Name = p.key.Namespace, p.key.Name
	if err := p.node.o.Client.Delete(ctx, obj, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	p.node.mu.Lock()
	if p.node.pods[p.key.String()] == p {
		delete(p.node.pods, p.key.String())
	}
	p.node.mu.Unlock()
	return errors.Join(errs...)
}

// cniConfig is the network configuration Cilium's chart writes (05-cilium.conflist's
// plugin), for the plugin's stdin.
const cniConfig = `{"cniVersion":"0.3.1","name":"cilium","type":"cilium-cni","enable-debug":false}`

// cni runs Cilium's CNI plugin as a container runtime does, in the node's namespace (where
// it makes the pod's veth, moving one end into the pod's), and returns its stdout.
func (n *Node) cni(ctx context.Context, command string, p *Pod) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+nodeNetns, "--", filepath.Join(n.o.Binaries, "cilium-cni"))
	cmd.Env = append(hostproc.EnvWithout(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+p.containerID,
		"CNI_NETNS=/run/netns/"+p.netns, "CNI_IFNAME=eth0", "CNI_PATH="+n.o.Binaries, "CILIUM_SOCK="+n.sock,
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE="+p.key.Namespace+";K8S_POD_NAME="+p.key.Name+";K8S_POD_INFRA_CONTAINER_ID="+p.containerID)
	cmd.Stdin = strings.NewReader(cniConfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if command == "DEL" {
			if _, statErr := os.Stat("/run/netns/" + p.netns); statErr != nil {
				return nil, nil // nothing left to remove
			}
		}
		return nil, fmt.Errorf("cilium-cni %s for %s: %v: %s %s", command, p.key, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}
