package cilium

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/cozystack/computeplane/internal/devenv/hostproc"
)

// agentArgs run the agent as a node of a cluster without kube-proxy replacement, with
// native routing of its pod CIDR, kubernetes IPAM (the Node's podCIDR), identities as
// CRDs (no kvstore) and no operator; what the test bed has no binary for is off (Envoy,
// so L7 and the DNS proxy; cilium-health; Hubble). It writes no CNI configuration and
// removes none (the VMs keep their own). Its state, BPF and cgroup mounts are the
// node's own directories, so nothing of the host's is shared.
func (n *Node) agentArgs() []string {
	d := n.o.Dir
	return []string{
		"--k8s-kubeconfig-path=" + filepath.Join(d, "kubeconfig"),
		"--ipam=kubernetes", "--k8s-require-ipv4-pod-cidr=true",
		"--enable-ipv4=true", "--enable-ipv6=false",
		"--routing-mode=native", "--ipv4-native-routing-cidr=" + PodCIDR, "--auto-direct-node-routes=false",
		"--enable-ipv4-masquerade=false", "--enable-bpf-masquerade=false",
		"--identity-allocation-mode=crd",
		"--kube-proxy-replacement=false",
		"--enable-l7-proxy=false", "--enable-hubble=false",
		"--enable-health-checking=false", "--enable-endpoint-health-checking=false",
		"--devices=eth0",
		"--cni-exclusive=false", "--write-cni-conf-when-ready=",
		"--lib-dir=" + filepath.Join(n.o.Binaries, "lib"),
		"--state-dir=" + filepath.Join(d, "state"),
		"--socket-path=" + n.sock,
		"--bpf-root=" + filepath.Join(d, "bpffs"),
		"--cgroup-root=" + filepath.Join(d, "cgroupv2"),
		"--prometheus-serve-addr=" + net.JoinHostPort(NodeIP, strconv.Itoa(metricsPort)),
	}
}

// startAgent writes the agent's kubeconfig and runs it in the node's namespace, then waits
// until its API says it is healthy.
func (n *Node) startAgent(ctx context.Context) error {
	cfg, err := clientcmd.Load(n.o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("the management kubeconfig: %w", err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + n.o.APIServer
		c.TLSServerName = n.o.ServerName
	}
	if err := clientcmd.WriteToFile(*cfg, filepath.Join(n.o.Dir, "kubeconfig")); err != nil {
		return err
	}
	if out, err := exec.Command("mount", "-t", "bpf", "bpf", filepath.Join(n.o.Dir, "bpffs")).CombinedOutput(); err != nil {
		return fmt.Errorf("mounting a BPF filesystem for the agent: %v: %s", err, out)
	}
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + nodeNetns, "--", filepath.Join(n.o.Binaries, "cilium-agent")}, n.agentArgs()...)...)
	cmd.Env = append(hostproc.EnvWithout("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "KUBECONFIG"), "K8S_NODE_NAME="+NodeName,
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	if n.agent, err = hostproc.StartCmd("cilium-agent", cmd, filepath.Join(n.o.Dir, "cilium-agent.log")); err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := n.healthy(ctx)
		if err == nil {
			return nil
		}
		if n.agent.Exited() {
			return fmt.Errorf("cilium-agent exited: %v\n%s", n.agent.ExitError(), n.agent.Tail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cilium-agent not healthy after 3m: %v\n%s", err, n.agent.Tail(30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// api is a client of the agent's REST API, on its unix socket.
func (n *Node) api() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", n.sock)
		},
	}}
}

// healthy asks the agent's /healthz: its state and every subsystem's must be Ok.
func (n *Node) healthy(ctx context.Context) error {
	if _, err := os.Stat(n.sock); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://cilium/v1/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := n.api().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var st struct {
		Cilium struct {
			State, Msg string
		} `json:"cilium"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return err
	}
	if st.Cilium.State != "Ok" {
		return fmt.Errorf("cilium-agent: %s %s", st.Cilium.State, st.Cilium.Msg)
	}
	return nil
}

// startEndpointSlices runs the real kube-controller-manager with the EndpointSlice
// controller only: a Service's slices name the Ready pods its selector matches, whose
// status the node writes as a kubelet would.
func (n *Node) startEndpointSlices() error {
	if err := os.WriteFile(filepath.Join(n.o.Dir, "kcm-kubeconfig"), n.o.Kubeconfig, 0o600); err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + filepath.Join(n.o.Dir, "kcm-kubeconfig"),
		"--controllers=endpointslice", "--leader-elect=false",
		"--secure-port=0",
	}
	env := hostproc.EnvWithout("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "KUBECONFIG")
	var err error
	n.kcm, err = hostproc.Start("management kube-controller-manager", filepath.Join(n.o.KubeBinaries, "kube-controller-manager"), args, env,
		filepath.Join(n.o.Dir, "kube-controller-manager.log"))
	return err
}
