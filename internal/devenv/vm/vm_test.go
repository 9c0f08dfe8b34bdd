package vm

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVMRunsItsBootstrapData: a VM runs its cloud-config's files and commands inside its
// own namespaces (its hostname, its /run), its containerd serves the preloaded images,
// and nothing of it is left once it is deleted.
func TestVMRunsItsBootstrapData(t *testing.T) {
	bins := os.Getenv("KUBEBUILDER_ASSETS")
	svc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	go func() {
		for {
			c, err := svc.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("served\n"))
			_ = c.Close()
		}
	}()
	resolve := func(hostPort string) (string, bool) {
		if hostPort == "10.0.0.7:80" {
			return svc.Addr().String(), true
		}
		return "", false
	}
	h, err := NewHost(Options{Dir: t.TempDir(), Binaries: bins, ServiceCIDR: "10.0.0.0/24", Resolve: resolve})
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	userData := "## template: jinja\n#cloud-config\nwrite_files:\n-   path: /run/kubeadm/greeting\n    permissions: '0600'\n    content: |\n      hello {{ ds.meta_data.local_hostname }}\nruncmd:\n  - hostname > /run/seen-hostname && mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n"
	v, err := h.Boot(ctx, "node-a", []byte(userData), Pod{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for v.Bootstrapped() == errBooting && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if err := v.Bootstrapped(); err != nil {
		t.Fatalf("bootstrap: %v\n%s", err, v.Log(20))
	}
	if got, _ := os.ReadFile(v.path("/run/seen-hostname")); strings.TrimSpace(string(got)) != "node-a" {
		t.Errorf("hostname inside the VM: %q, want node-a", got)
	}
	if got, _ := os.ReadFile(v.path("/run/kubeadm/greeting")); string(got) != "hello node-a\n" {
		t.Errorf("the rendered file: %q", got)
	}
	if _, err := os.Stat("/run/seen-hostname"); err == nil {
		t.Error("the VM's /run is the host's")
	}
	out, err := v.command("ctr", "--address", "/run/containerd/containerd.sock", "-n", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil || !strings.Contains(string(out), SandboxImage) || !strings.Contains(string(out), BusyboxImage) {
		t.Errorf("the VM's images: %v: %s", err, out)
	}
	// A Service address reaches what it is mapped to; another one nothing.
	if out, err := v.command("busybox", "nc", "-w", "2", "10.0.0.7", "80").CombinedOutput(); err != nil || string(out) != "served\n" {
		t.Errorf("the VM reaching a mapped Service: %v: %q", err, out)
	}
	if out, _ := v.command("busybox", "nc", "-w", "2", "10.0.0.8", "80").CombinedOutput(); strings.Contains(string(out), "served") {
		t.Errorf("the VM reached an unmapped Service address: %q", out)
	}
	cg := filepath.Join(cgroupRoot, "pids", v.cgroup())
	if err := h.Delete("node-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg); err == nil {
		t.Errorf("the VM's cgroup %s is left", cg)
	}
	if out, _ := run("ip", "netns", "list"); strings.Contains(out, v.net.netns) {
		t.Errorf("the VM's network namespace is left: %s", out)
	}
}
