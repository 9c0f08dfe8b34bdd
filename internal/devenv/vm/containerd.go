package vm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cozystack/computeplane/internal/devenv/hostproc"
)

// containerdConfig is the VM's containerd: its root on the VM's disk, its state and
// socket in the VM's /run (at the default socket path, which kubeadm's and the kubelet's
// defaults name), runc with cgroupfs (no systemd), the preloaded sandbox image, and
// restrict_oom_score_adj: this machine's bounding set lacks CAP_SYS_RESOURCE, and without
// it every pod fails (the CRI asks for oom_score_adj -998).
const containerdConfig = `version = 2
root = %q
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = false
`

// bridgeNetwork is the VM's pod network until a CNI add-on installs its own: a bridge
// with the VM's pod subnet, masqueraded out of eth0, its leases in the VM's /run.
const bridgeNetwork = `{"cniVersion": "0.4.0", "name": "vm", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
`

func (v *VM) writeImageConfig() error {
	if err := os.WriteFile(filepath.Join(v.dir, "containerd.toml"),
		fmt.Appendf(nil, containerdConfig, filepath.Join(v.dir, "containerd"), SandboxImage), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(v.dir, "disk", "/etc/cni/net.d", "10-bridge.conflist"),
		fmt.Appendf(nil, bridgeNetwork, v.net.podCIDR), 0o644)
}

// startContainerd starts the VM's containerd and imports the images its disk comes with.
func (v *VM) startContainerd(ctx context.Context) error {
	p, err := hostproc.StartCmd("containerd of VM "+v.Name, v.command("containerd", "--config", filepath.Join(v.dir, "containerd.toml")),
		filepath.Join(v.dir, "containerd.log"))
	if err != nil {
		return err
	}
	v.containerd = p
	if err := waitFor(ctx, 30*time.Second, "the VM's containerd socket", func() error {
		if p.Exited() {
			return p.ExitError()
		}
		_, err := os.Stat(v.path("/run/containerd/containerd.sock"))
		return err
	}); err != nil {
		return err
	}
	for _, img := range v.host.images {
		if out, err := v.command("ctr", "--address", "/run/containerd/containerd.sock", "-n", "k8s.io", "images", "import", img).CombinedOutput(); err != nil {
			return fmt.Errorf("importing %s into VM %s: %v: %s", img, v.Name, err, out)
		}
	}
	return nil
}
