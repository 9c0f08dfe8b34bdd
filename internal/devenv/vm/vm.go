package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cozystack/computeplane/internal/devenv/hostproc"
	"github.com/cozystack/computeplane/internal/devenv/netns"
)

// VM is one running VM.
type VM struct {
	Name string
	host *Host
	net  network
	lock *os.File
	dir  string // the VM's disk and logs
	fwd  *forwarder
	dns  *netns.DNS

	holder     *hostproc.Process // holds the mount and UTS namespaces
	containerd *hostproc.Process
	kubelet    *unit

	off    sync.Once
	offErr error

	mu        sync.Mutex
	bootstrap error // cloud-init's outcome once it ran; errBooting until then
}

var errBooting = errors.New("cloud-init has not finished")

// disk are the VM's own directories, bind-mounted over the host's in its mount
// namespace (the host's directories are created empty when missing, as mount points).
var disk = []string{"/etc/kubernetes", "/var/lib/kubelet", "/etc/cni/net.d", "/var/log/pods", "/var/log/containers"}

// cgroup is the VM's cgroup name, in every hierarchy: its processes under
// pids/<cgroup>/system, its kubelet's pods under <cgroup>/kubepods.
func (v *VM) cgroup() string { return v.net.netns }

// Address is the VM's address (its eth0).
func (v *VM) Address() string { return v.net.guestIP }

// Netns is the name of the VM's network namespace.
func (v *VM) Netns() string { return v.net.netns }

// PodCIDR is the subnet the VM's bridge gives its pods.
func (v *VM) PodCIDR() string { return v.net.podCIDR }

// Dir is the VM's directory: disk/<path> for its disk, and the logs.
func (v *VM) Dir() string { return v.dir }

// Bootstrapped is nil once cloud-init ran every command and the kubeadm bootstrap's
// sentinel file is written, the error otherwise.
func (v *VM) Bootstrapped() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.bootstrap
}

func boot(ctx context.Context, h *Host, name string, userData []byte, pod Pod) (_ *VM, err error) {
	if h.o.PodNetwork != nil && (pod.Namespace == "" || pod.Name == "") {
		return nil, fmt.Errorf("VM %s: on a pod network a VM needs its pod's namespace and name", name)
	}
	cc, err := ParseUserData(userData, Metadata{InstanceID: name, LocalHostname: name})
	if err != nil {
		return nil, err
	}
	index, lock, err := claimIndex()
	if err != nil {
		return nil, err
	}
	v := &VM{Name: name, host: h, net: newNetwork(index), lock: lock, bootstrap: errBooting,
		dir: filepath.Join(h.o.Dir, "vms", name)}
	defer func() {
		if err != nil {
			_ = v.powerOff(true)
		}
	}()
	_ = killCgroup(v.cgroup(), 10*time.Second) // what a crashed run left under this index
	_ = os.RemoveAll(v.dir)
	for _, d := range disk {
		if err := os.MkdirAll(filepath.Join(v.dir, "disk", d), 0o755); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if h.o.PodNetwork != nil {
		v.net.pods, v.net.pod = h.o.PodNetwork, pod
	}
	if err := v.net.create(ctx); err != nil {
		return nil, err
	}
	nameserver := v.net.guestIP
	switch {
	case h.o.PodNetwork != nil:
		// The pod network's own Services and DNS: the node's CNI translates ClusterIPs
		// and polices what the VM reaches.
		nameserver = h.o.PodNetwork.Nameserver()
	case h.o.ServiceCIDR != "":
		if v.fwd, err = startForwarder(v.net.netns, v.net.guestIP, h.o.Resolve); err != nil {
			return nil, err
		}
		if err := v.net.routeServices(h.o.ServiceCIDR, v.fwd.port()); err != nil {
			return nil, err
		}
	}
	if h.o.PodNetwork == nil {
		lookup := h.o.LookupService
		if lookup == nil {
			lookup = func(string, string) (string, bool) { return "", false }
		}
		if v.dns, err = netns.ServeDNS(v.net.netns, v.net.guestIP+":53", lookup); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(v.dir, "resolv.conf"), []byte(netns.ResolvConf(nameserver)), 0o644); err != nil {
		return nil, err
	}
	// cloud-init's manage_etc_hosts: the VM's own name resolves.
	if err := os.WriteFile(filepath.Join(v.dir, "hosts"), fmt.Appendf(nil, "127.0.0.1 localhost\n%s %s\n", v.net.guestIP, name), 0o644); err != nil {
		return nil, err
	}
	if err := v.startHolder(ctx); err != nil {
		return nil, err
	}
	if err := v.writeImageConfig(); err != nil {
		return nil, err
	}
	if err := v.startContainerd(ctx); err != nil {
		return nil, err
	}
	v.kubelet = startKubelet(v)
	go v.runCloudInit(cc)
	return v, nil
}

// startHolder starts the process that holds the VM's mount and UTS namespaces (inside
// its network namespace): the hostname, a private /run, the VM's disk directories.
func (v *VM) startHolder(ctx context.Context) error {
	var script strings.Builder
	fmt.Fprintf(&script, "set -e\nhostname %s\nmount -t tmpfs -o mode=755 tmpfs /run\n", v.Name)
	for _, d := range disk {
		fmt.Fprintf(&script, "mount --bind %s %s\n", filepath.Join(v.dir, "disk", d), d)
	}
	for _, f := range []string{"resolv.conf", "hosts"} {
		fmt.Fprintf(&script, "mount --bind %s /etc/%s\n", filepath.Join(v.dir, f), f)
	}
	script.WriteString("touch /run/computeplane-vm-ready\nexec sleep 2147483647\n")
	cmd := exec.Command("nsenter", "--net=/run/netns/"+v.net.netns, "--",
		"unshare", "--mount", "--uts", "--propagation", "private", "--",
		"/bin/sh", "-c", enterCgroup(v.cgroup()), "/bin/sh", "-c", script.String())
	p, err := hostproc.StartCmd("VM "+v.Name, cmd, filepath.Join(v.dir, "vm.log"))
	if err != nil {
		return err
	}
	v.holder = p
	return waitFor(ctx, 10*time.Second, "the VM's namespaces", func() error {
		if p.Exited() {
			return p.ExitError()
		}
		_, err := os.Stat(v.path("/run/computeplane-vm-ready"))
		return err
	})
}

// path is where the host sees a path of the VM's filesystem (through its holder's root).
func (v *VM) path(p string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", v.holder.Pid()), p)
}

// command runs argv inside the VM (its network, mount and UTS namespaces, its cgroup),
// as root with the VM image's PATH.
func (v *VM) command(argv ...string) *exec.Cmd {
	args := append([]string{"--target", fmt.Sprint(v.holder.Pid()), "--net", "--mount", "--uts", "--",
		"/bin/sh", "-c", enterCgroup(v.cgroup())}, argv...)
	cmd := exec.Command("nsenter", args...)
	cmd.Env = []string{"PATH=" + v.host.bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	return cmd
}

// powerOff kills every process of the VM and removes its namespaces, and its disk when
// deleting.
func (v *VM) powerOff(deleting bool) error {
	// Once: after the first, the index (and its cgroup and namespace names) may be
	// another VM's.
	v.off.Do(func() { v.offErr = v.doPowerOff(deleting) })
	return v.offErr
}

func (v *VM) doPowerOff(deleting bool) error {
	if v.kubelet != nil {
		v.kubelet.stop()
	}
	var errs []error
	errs = append(errs, killCgroup(v.cgroup(), 10*time.Second))
	for _, p := range []*hostproc.Process{v.containerd, v.holder} {
		p.Kill()
	}
	if v.fwd != nil {
		v.fwd.close()
	}
	if v.dns != nil {
		v.dns.Close()
	}
	v.net.destroy()
	if v.lock != nil {
		_ = v.lock.Close()
	}
	if deleting && v.dir != "" {
		errs = append(errs, os.RemoveAll(filepath.Join(v.dir, "disk")))
	}
	return errors.Join(errs...)
}

// Log is the end of the VM's logs: cloud-init's output, containerd's and the kubelet's.
func (v *VM) Log(lines int) string {
	var b strings.Builder
	for _, f := range []string{"cloud-init-output.log", "containerd.log", "kubelet.log"} {
		data, err := os.ReadFile(filepath.Join(v.dir, f))
		if err != nil {
			continue
		}
		all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(all) > lines {
			all = all[len(all)-lines:]
		}
		fmt.Fprintf(&b, "--- %s (VM %s)\n%s\n", f, v.Name, strings.Join(all, "\n"))
	}
	return b.String()
}
