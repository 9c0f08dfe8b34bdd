package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cozystack/computeplane/internal/devenv/hostproc"
)

// The files kubeadm writes for the kubelet, and the ones its systemd drop-in
// (10-kubeadm.conf in the kubeadm package) reads: the kubelet runs with
// --bootstrap-kubeconfig, --kubeconfig, --config and $KUBELET_KUBEADM_ARGS from
// kubeadm-flags.env.
const (
	kubeletBootstrapKubeconfig = "/etc/kubernetes/bootstrap-kubelet.conf"
	kubeletKubeconfig          = "/etc/kubernetes/kubelet.conf"
	kubeletConfig              = "/var/lib/kubelet/config.yaml"
	kubeadmFlagsEnv            = "/var/lib/kubelet/kubeadm-flags.env"
	kubeletDropIns             = "/etc/kubernetes/kubelet.conf.d"
)

// vmKubeletConfig is the VM image's drop-in over the configuration kubeadm downloads
// from the plane (the kubelet merges --config-dir over --config): what differs from a
// real VM because this one is namespaces on a shared host. cgroupfs (there is no
// systemd), a cgroup root of its own (the host runs many nodes' kubelets), cgroup v1
// allowed (the host's), no swap check, and eviction thresholds a shared disk does not
// trip.
const vmKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
failSwapOn: false
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
`

// unit plays systemd's kubelet.service with kubeadm's drop-in: once kubeadm has written
// the kubelet's configuration, the kubelet runs, and is restarted a second after it
// exits (Restart=always, RestartSec; the real unit crash-loops until the files exist),
// until the VM powers off or the kubelet is killed for good (Kill).
type unit struct {
	v      *VM
	stopCh chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	proc     *hostproc.Process
	disabled bool
	starts   int
}

func startKubelet(v *VM) *unit {
	u := &unit{v: v, stopCh: make(chan struct{}), done: make(chan struct{})}
	go u.run()
	return u
}

func (u *unit) run() {
	defer close(u.done)
	log := filepath.Join(u.v.dir, "kubelet.log")
	for {
		select {
		case <-u.stopCh:
			return
		case <-time.After(time.Second):
		}
		if !u.configured() {
			continue
		}
		u.mu.Lock()
		if u.disabled {
			u.mu.Unlock()
			continue
		}
		args, err := u.args()
		if err != nil {
			u.mu.Unlock()
			appendLog(log, fmt.Sprintf("kubelet.service: %v\n", err))
			continue
		}
		p, err := hostproc.StartCmd("kubelet of VM "+u.v.Name, u.v.command(append([]string{"kubelet"}, args...)...), log)
		if err != nil {
			u.mu.Unlock()
			appendLog(log, fmt.Sprintf("kubelet.service: %v\n", err))
			continue
		}
		u.proc = p
		u.starts++
		u.mu.Unlock()
		select {
		case <-p.Done():
		case <-u.stopCh:
			p.Stop(5 * time.Second)
			return
		}
	}
}

// configured: kubeadm's kubelet-start phase has written the configuration and a
// kubeconfig (the bootstrap one, or the kubelet's own after its TLS bootstrap).
func (u *unit) configured() bool {
	if _, err := os.Stat(u.v.path(kubeletConfig)); err != nil {
		return false
	}
	for _, k := range []string{kubeletBootstrapKubeconfig, kubeletKubeconfig} {
		if _, err := os.Stat(u.v.path(k)); err == nil {
			return true
		}
	}
	return false
}

// args are the drop-in's ExecStart arguments.
func (u *unit) args() ([]string, error) {
	if err := makeCgroupRoot(u.v.cgroup()); err != nil {
		return nil, err
	}
	dropIns := u.v.path(kubeletDropIns)
	if err := os.MkdirAll(dropIns, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dropIns, "90-computeplane-vm.conf"), fmt.Appendf(nil, vmKubeletConfig, u.v.cgroup()), 0o644); err != nil {
		return nil, err
	}
	args := []string{"--bootstrap-kubeconfig=" + kubeletBootstrapKubeconfig, "--kubeconfig=" + kubeletKubeconfig,
		"--config=" + kubeletConfig, "--config-dir=" + kubeletDropIns}
	env, err := os.ReadFile(u.v.path(kubeadmFlagsEnv))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	flags, err := envFileValue(string(env), "KUBELET_KUBEADM_ARGS")
	if err != nil {
		return nil, err
	}
	return append(args, flags...), nil
}

// envFileValue reads one variable of a systemd EnvironmentFile and splits it into words
// the way ExecStart's $VAR expansion does (whitespace; the value may be double-quoted).
func envFileValue(content, name string) ([]string, error) {
	for _, line := range strings.Split(content, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || k != name {
			continue
		}
		if strings.HasPrefix(v, `"`) {
			if !strings.HasSuffix(v, `"`) || len(v) < 2 {
				return nil, fmt.Errorf("%s: unterminated quote in %q", name, v)
			}
			v = v[1 : len(v)-1]
		}
		return strings.Fields(v), nil
	}
	return nil, nil
}

// Kill kills the kubelet and keeps it down (a node whose kubelet died for good).
func (u *unit) Kill() {
	u.mu.Lock()
	u.disabled = true
	p := u.proc
	u.mu.Unlock()
	p.Kill()
}

// Starts is how many times the kubelet was started.
func (u *unit) Starts() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.starts
}

func (u *unit) stop() {
	select {
	case <-u.stopCh:
	default:
		close(u.stopCh)
	}
	<-u.done
	u.mu.Lock()
	p := u.proc
	u.mu.Unlock()
	p.Kill()
}

func appendLog(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	_, _ = f.WriteString(line)
	_ = f.Close()
}

// KillKubelet kills the VM's kubelet and keeps it down.
func (v *VM) KillKubelet() { v.kubelet.Kill() }

// KubeletStarts is how many times the VM's kubelet was started.
func (v *VM) KubeletStarts() int { return v.kubelet.Starts() }
