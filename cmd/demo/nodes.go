package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/internal/devenv/cilium"
	"github.com/cozystack/computeplane/internal/devenv/vm"
)

// startNodes starts the management node with its real cilium-agent (the cluster DNS,
// the plane's control-plane pods and an address outside the cluster with it), Cluster
// API's real managers and the host of the VMs its Machines boot, each VM in a
// virt-launcher pod of that node; the returned func stops them all.
func (w *walkthrough) startNodes(proxy *devenv.PlaneProxy, dir string) (_ *vm.Host, stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	capiBin, err := devenv.ClusterAPIBinaries()
	if err != nil {
		return nil, nil, err
	}
	ciliumBin, err := devenv.CiliumBinaries()
	if err != nil {
		return nil, nil, err
	}
	if w.node, err = devenv.StartCiliumNode(w.ctx, w.mgmt, ciliumBin, filepath.Join(dir, "node")); err != nil {
		return nil, nil, fmt.Errorf("%w (the demo's plane has a real node behind a real Cilium: run it as root, with `apt-get install clang llvm`)", err)
	}
	stops = append(stops, w.node.Close)
	dns, err := w.node.ServeClusterDNS(w.ctx, w.serviceIP)
	if err != nil {
		return nil, nil, err
	}
	world, err := cilium.StartWorld()
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, world.Close)
	cp := devenv.StartControlPlanePods(w.ctx, w.mgmt.Client, w.node, proxy)
	stops = append(stops, cp.Stop)
	host, err := vm.NewHost(vm.Options{Dir: filepath.Join(dir, "vms"), Binaries: w.mgmt.Env.BinaryAssetsDirectory, PodNetwork: w.node.VMs(dns)})
	if err != nil {
		return nil, nil, fmt.Errorf("%w (the demo's plane has a real node: run it as root, with `apt-get install containerd runc iptables containernetworking-plugins busybox-static`)", err)
	}
	stops = append(stops, func() { _ = host.Close() })
	w.vms = host
	capiDir := filepath.Join(dir, "cluster-api")
	if err := os.MkdirAll(capiDir, 0o755); err != nil {
		return nil, nil, err
	}
	capi, err := devenv.StartClusterAPI(w.ctx, w.mgmt, devenv.ClusterAPIOptions{Binaries: capiBin, Dir: capiDir, Proxy: proxy})
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, capi.Stop)
	return host, stop, nil
}

// startFlux starts the real Flux helm-controller and serves the demo's app chart as an
// ExternalArtifact in cozy-public (the sample class's placement source); the returned
// func stops both.
func (w *walkthrough) startFlux() (func(), error) {
	bin := devenv.FluxHelmControllerBinary()
	if bin == "" {
		return nil, fmt.Errorf("the Flux helm-controller is not built: run test/tools/flux.sh (`make demo` does), or set FLUX_HELM_CONTROLLER to its output")
	}
	stopCharts, err := devenv.ServeCharts(w.ctx, w.mgmt.Client, "cozy-public", map[string]devenv.Chart{
		"hello-web": devenv.WebChart()})
	if err != nil {
		return nil, err
	}
	flux, err := devenv.StartHelmController(w.mgmt, bin)
	if err != nil {
		stopCharts()
		return nil, err
	}
	return func() { flux.Stop(); stopCharts() }, nil
}

// helloWebRelease is a placement release of it: the label routes it into the plane.
const helloWebRelease = `{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{"name":"hello-web","namespace":"tenant-demo","labels":{"computeplane.cozystack.io/placement":"ComputePlane"}},` +
	`"spec":{"interval":"10m","releaseName":"hello-web","chartRef":{"kind":"ExternalArtifact","name":"hello-web","namespace":"cozy-public"},"targetNamespace":"notebooks","install":{"disableWait":true},"upgrade":{"disableWait":true}}}`

// serviceIP is the management cluster's DNS for the VMs: a Service's ClusterIP by name.
func (w *walkthrough) serviceIP(service, namespace string) (string, bool) {
	ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
	defer cancel()
	svc := &corev1.Service{}
	if err := w.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: service}, svc); err != nil ||
		svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return "", false
	}
	return svc.Spec.ClusterIP, true
}

// nodes shows the sample plane's worker node, joined through the bootstrap data Cluster
// API rendered from the operator's templates, and a pod running on it. It fails the demo
// when no node joins, or the pod does not run there.
func (w *walkthrough) nodes() error {
	step("The plane's node group became a real node: Cluster API (the real core and kubeadm bootstrap managers) made a Machine, its VM ran the bootstrap data (kubeadm join), and the kubelet registered")
	if err := w.kubectl.run("get", "-n", w.infra, "machinedeployments,machinesets,machines,kubevirtmachines"); err != nil {
		return err
	}
	plane := func(args ...string) []string { return append([]string{"--kubeconfig", w.planeKubeconfig}, args...) }
	if err := w.kubectl.until(4*time.Minute, plane("wait", "--for=condition=Ready", "nodes", "-l", cpv1.NodeGroupLabel+"=workers", "--timeout=10s")...); err != nil {
		return fmt.Errorf("no node of the workers group became Ready in the plane: %w", err)
	}
	if err := w.kubectl.run(plane("get", "nodes", "-o", "wide", "-L", cpv1.NodeGroupLabel)...); err != nil {
		return err
	}
	step("A pod that the restricted profile admits runs on that node (its image is preloaded on the VM's disk: there is no registry here)")
	overrides := fmt.Sprintf(`{"spec":{"containers":[{"name":"hello","image":%q,"command":["/bin/sh","-c","echo hello from $(hostname); sleep 3600"],`+
		`"securityContext":{"allowPrivilegeEscalation":false,"runAsNonRoot":true,"runAsUser":65534,"capabilities":{"drop":["ALL"]},"seccompProfile":{"type":"RuntimeDefault"}}}]}}`, vm.BusyboxImage)
	if err := w.kubectl.run(plane("run", "hello", "-n", "notebooks", "--image="+vm.BusyboxImage, "--restart=Never", "--overrides="+overrides)...); err != nil {
		return err
	}
	if err := w.kubectl.run(plane("wait", "--for=condition=Ready", "-n", "notebooks", "pod/hello", "--timeout=120s")...); err != nil {
		return fmt.Errorf("the pod did not run on the plane's node: %w", err)
	}
	// No `kubectl logs`: the plane's API server reaches its kubelets through konnectivity,
	// which the test bed does not run, and the VMs' ingress baseline (rightly) refuses a
	// control plane that dials a node directly.
	if err := w.kubectl.run(plane("get", "pods", "-n", "notebooks", "-o", "wide")...); err != nil {
		return err
	}
	step("A placement release lands on that node: the real Flux helm-controller installs it into the plane as the deployer, and its Deployment's pod runs there (Ready: its httpd answers the kubelet's probe)")
	if _, err := w.kubectl.stdinOutput(helloWebRelease, "apply", "-f", "-"); err != nil {
		return err
	}
	if err := w.kubectl.run("wait", "--for=condition=Ready", "-n", "tenant-demo", "helmrelease/hello-web", "--timeout=120s"); err != nil {
		return fmt.Errorf("Flux did not install the placement release into the plane: %w", err)
	}
	// Until the ReplicaSet has made the pod, kubectl wait finds nothing to wait for.
	if err := w.kubectl.until(2*time.Minute, plane("wait", "--for=condition=Ready", "-n", "notebooks", "pod", "-l", "app=hello-web", "--timeout=10s")...); err != nil {
		return fmt.Errorf("the placement release's pod did not run on the plane's node: %w", err)
	}
	return w.kubectl.run(plane("get", "pods", "-n", "notebooks", "-l", "app=hello-web", "-o", "wide")...)
}
