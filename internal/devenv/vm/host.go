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
)

// Options shape a Host.
type Options struct {
	// Dir holds each VM's disk, its logs and the images.
	Dir string
	// Binaries is the directory holding kubelet and kubeadm (test/tools/build.sh's output).
	Binaries string
	// ServiceCIDR is the management cluster's Service network; a VM's TCP to it goes to
	// Resolve (the plane's control plane is a Service there).
	ServiceCIDR string
	// Resolve maps a Service address (ClusterIP:port) to the local address serving it.
	Resolve func(hostPort string) (string, bool)
	// LookupService is the management cluster's DNS: a Service's ClusterIP by name. With
	// it, each VM resolves <service>.<namespace>.svc[.cluster.local]; without it, nothing.
	LookupService func(service, namespace string) (string, bool)
	// Images every VM's disk comes with; BusyboxImages when nil.
	Images []Image
	// PodNetwork, when set, is where each VM's network comes from: the VM is plumbed as
	// its pod there (Boot's pod), and reaches Services and DNS through that network
	// (ServiceCIDR, Resolve and LookupService are then unused).
	PodNetwork PodNetwork
}

// Host runs VMs.
type Host struct {
	o      Options
	images []string // OCI archives of o.Images
	bin    string   // the VMs' PATH: kubeadm as the VM image has it, the kubelet

	mu  sync.Mutex
	vms map[string]*VM
}

// Requirements are the host commands a VM needs (Debian: iproute2, iptables, containerd,
// runc, util-linux, busybox-static, containernetworking-plugins).
var Requirements = []string{"ip", "iptables", "containerd", "ctr", "runc", "nsenter", "unshare", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/bin/busybox"}

// ErrUnsupported says this machine cannot run VMs (not root, or a requirement missing).
var ErrUnsupported = errors.New("this machine cannot run the test bed's VMs")

// NewHost checks the machine and prepares the images and the VMs' binaries.
func NewHost(o Options) (*Host, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: namespaces, veths and containerd need root", ErrUnsupported)
	}
	for _, r := range Requirements {
		if _, err := exec.LookPath(r); err != nil {
			return nil, fmt.Errorf("%w: %s is missing (apt-get install iproute2 iptables containerd runc util-linux busybox-static containernetworking-plugins)", ErrUnsupported, r)
		}
	}
	for _, b := range []string{"kubelet", "kubeadm"} {
		if _, err := os.Stat(filepath.Join(o.Binaries, b)); err != nil {
			return nil, fmt.Errorf("%w: %s is not built (test/tools/build.sh builds it)", ErrUnsupported, b)
		}
	}
	if o.Images == nil {
		imgs, err := BusyboxImages()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		o.Images = imgs
	}
	h := &Host{o: o, vms: map[string]*VM{}, bin: filepath.Join(o.Dir, "bin")}
	if err := os.MkdirAll(filepath.Join(o.Dir, "images"), 0o755); err != nil {
		return nil, err
	}
	for i, img := range o.Images {
		a, err := img.OCIArchive()
		if err != nil {
			return nil, err
		}
		p := filepath.Join(o.Dir, "images", fmt.Sprintf("%d.tar", i))
		if err := os.WriteFile(p, a, 0o644); err != nil {
			return nil, err
		}
		h.images = append(h.images, p)
	}
	if err := h.writeBinaries(); err != nil {
		return nil, err
	}
	sweepStale()
	return h, nil
}

// sweepStale removes what VMs of crashed runs left (a network namespace, cgroups and
// their processes) under every index no live VM holds: a test that checks nothing of
// its VMs is left then sees its own leftovers only.
func sweepStale() {
	for i := 1; i <= vmIndexes; i++ {
		n := newNetwork(i)
		_, nsErr := os.Stat("/run/netns/" + n.netns)
		_, cgErr := os.Stat(filepath.Join(cgroupRoot, "pids", n.netns))
		if nsErr != nil && cgErr != nil {
			continue
		}
		f, err := hostproc.Lock(n.netns, 0)
		if err != nil {
			continue // a live VM's
		}
		_ = killCgroup(n.netns, 10*time.Second)
		n.destroy()
		_ = f.Close()
	}
}

// kubeadmPreflightIgnored are the kubeadm preflight checks that judge this host, not
// the bootstrap data: the VM is a set of namespaces on a cgroup v1 host (SystemVerification
// refuses cgroup v1 for kubelet v1.35+) whose kernel may not have br_netfilter loaded.
// Every other check runs.
var kubeadmPreflightIgnored = []string{"SystemVerification", "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"}

// writeBinaries lays out the VM image's /usr/bin as the VMs' PATH: the kubelet, and a
// kubeadm that passes kubeadmPreflightIgnored to `kubeadm join`.
func (h *Host) writeBinaries() error {
	if err := os.MkdirAll(h.bin, 0o755); err != nil {
		return err
	}
	kubelet := filepath.Join(h.bin, "kubelet")
	_ = os.Remove(kubelet)
	if err := os.Symlink(filepath.Join(h.o.Binaries, "kubelet"), kubelet); err != nil {
		return err
	}
	script := fmt.Sprintf(`#!/bin/sh
# The test bed VM image's kubeadm (internal/devenv/vm): the real one, with the preflight
# checks that judge the host rather than the node's configuration ignored on join.
if [ "$1" = join ]; then exec %[1]s "$@" --ignore-preflight-errors=%[2]s; fi
exec %[1]s "$@"
`, filepath.Join(h.o.Binaries, "kubeadm"), strings.Join(kubeadmPreflightIgnored, ","))
	return os.WriteFile(filepath.Join(h.bin, "kubeadm"), []byte(script), 0o755)
}

// Boot starts a VM named name from its bootstrap data, unless it runs already. pod is
// the VM's pod on the host's PodNetwork (ignored without one).
func (h *Host) Boot(ctx context.Context, name string, userData []byte, pod Pod) (*VM, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.vms[name]; ok {
		return v, nil
	}
	v, err := boot(ctx, h, name, userData, pod)
	if err != nil {
		return nil, err
	}
	h.vms[name] = v
	return v, nil
}

// Get is the VM named name, if it runs.
func (h *Host) Get(name string) (*VM, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.vms[name]
	return v, ok
}

// Names lists the running VMs.
func (h *Host) Names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.vms))
	for n := range h.vms {
		out = append(out, n)
	}
	return out
}

// Delete powers the VM off and deletes its disk: every process of it is killed, its
// namespaces and cgroups removed.
func (h *Host) Delete(name string) error {
	h.mu.Lock()
	v, ok := h.vms[name]
	h.mu.Unlock()
	if !ok {
		return nil
	}
	// Listed (Names, Get) until it is powered off: nothing of it is left once it is not.
	err := v.powerOff(true)
	h.mu.Lock()
	if h.vms[name] == v {
		delete(h.vms, name)
	}
	h.mu.Unlock()
	return err
}

// Close deletes every VM.
func (h *Host) Close() error {
	var errs []error
	for _, n := range h.Names() {
		errs = append(errs, h.Delete(n))
	}
	return errors.Join(errs...)
}

// vmIndexes bounds the VMs on one host (the third octet of its addresses).
const vmIndexes = 250

// claimIndex takes the first free VM index on this host, under a host-wide lock held
// while the VM lives.
func claimIndex() (int, *os.File, error) {
	for i := 1; i <= vmIndexes; i++ {
		f, err := hostproc.Lock(fmt.Sprintf("computeplane-vm-%d", i), 0)
		if err == nil {
			return i, f, nil
		}
	}
	return 0, nil, fmt.Errorf("all %d VM slots of this host are taken", vmIndexes)
}

func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s after %s: %w", what, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
