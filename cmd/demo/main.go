// Command demo is the embedded default: it starts a local management kube-apiserver (with
// the ComputePlane and upstream CRDs), installs the operator from its chart, runs the real
// Kamaji v1.0.0 manager (test/tools/kamaji.sh builds it) whose control planes run as host
// processes, with stand-ins for Kamaji's Cluster API provider and Cluster API core written
// from their source (internal/devenv/capistandin), applies the sample class and plane with kubectl,
// and prints what an operator would see. It removes everything it started when it exits
// or on Ctrl-C.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/internal/devenv/capistandin"
	"github.com/cozystack/computeplane/internal/devenv/cilium"
	"github.com/cozystack/computeplane/internal/devenv/vm"
)

func main() {
	stay := flag.Bool("wait", false, "keep running after the walkthrough until Ctrl-C, to explore with kubectl")
	verbose := flag.Bool("v", false, "show the operator's logs")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseDevMode(false), zap.Level(logLevel(*verbose))))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *stay, *verbose); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func logLevel(verbose bool) zapcore.Level {
	if verbose {
		return zapcore.InfoLevel
	}
	// The walkthrough checks every outcome itself; the operator's logs (including the
	// terminal error a Stalled plane logs) would only interleave with kubectl's output.
	return zapcore.DPanicLevel
}

func run(ctx context.Context, stay, verbose bool) error {
	kamajiBin, err := devenv.KamajiBinary()
	if err != nil {
		return fmt.Errorf("%w (`make demo` builds it)", err)
	}
	// Kamaji writes kubeconfigs that name a plane by its in-cluster Service
	// (https://<name>.<namespace>.svc:6443), which a host cannot resolve: a local CONNECT
	// proxy stands in for the cluster network. Everything that talks to planes (the
	// operator, Kamaji, kubectl) finds it through HTTPS_PROXY, set before any HTTP client
	// of this process reads it.
	proxy, err := devenv.StartPlaneProxy()
	if err != nil {
		return err
	}
	defer func() { _ = proxy.Close() }()
	if err := proxy.Export(); err != nil {
		return err
	}
	step("Starting a management kube-apiserver and etcd (with the Cluster API, Kamaji, CAPK, Cilium and Flux CRDs)")
	scheme := controllers.NewScheme()
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme, Bare: true, ClusterAPI: true, Cilium: true})
	if err != nil {
		return err
	}
	defer func() {
		step("Stopping the apiservers")
		_ = mgmt.Stop()
	}()
	root, err := devenv.RepoRoot()
	if err != nil {
		return err
	}
	kubeconfig, cleanup, err := writeKubeconfig(mgmt)
	if err != nil {
		return err
	}
	defer cleanup()
	w := &walkthrough{
		ctx:     ctx,
		mgmt:    mgmt,
		kubectl: kubectl{ctx: ctx, bin: filepath.Join(mgmt.Env.BinaryAssetsDirectory, "kubectl"), kubeconfig: kubeconfig},
		root:    root,
		samples: filepath.Join(root, "config", "samples"),
		key:     client.ObjectKey{Namespace: "tenant-demo", Name: "demo"},
	}

	stopComponents, err := w.startComponents(scheme, kamajiBin, proxy, verbose)
	if err != nil {
		return err
	}
	defer stopComponents()
	for _, section := range []func() error{w.provision, w.showBeacon, w.insidePlane, w.nodes, w.egress, w.tenantGuards, w.admissionChecks, w.grantsAndReconcile} {
		if err := section(); err != nil {
			return err
		}
	}
	if stay {
		step("Still running. In another shell: export KUBECONFIG=" + kubeconfig + " HTTPS_PROXY=" + proxy.URL().String() +
			" (the proxy reaches planes at the names Kamaji writes); Ctrl-C here to stop and clean up")
		<-ctx.Done()
		return nil
	}
	return w.teardown()
}

// walkthrough is what the demo's sections share: the management cluster, kubectl against
// it, the samples, and the sample plane.
type walkthrough struct {
	ctx     context.Context
	mgmt    *devenv.Cluster
	kubectl kubectl
	root    string
	samples string
	key     client.ObjectKey // the sample plane
	infra   string           // its infrastructure namespace, once provisioned
	// planeKubeconfig is the plane's admin kubeconfig, written by insidePlane.
	planeKubeconfig string
	// node is the management node whose cilium-agent polices the VMs' pods; vms the VMs.
	node *cilium.Node
	vms  *vm.Host
}

// startComponents installs the operator from its chart and starts Kamaji and the stand-ins
// for Cluster API; the returned func stops them.
func (w *walkthrough) startComponents(scheme *runtime.Scheme, kamajiBin string, proxy *devenv.PlaneProxy, verbose bool) (stop func(), err error) {
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
	step("Installing the operator from its Helm chart (config/helm/computeplane, which renders exactly config/default)")
	op, err := installOperator(w.ctx, w.mgmt, w.root, w.kubectl.run, w.kubectl.piped, verbose)
	if err != nil {
		return nil, err
	}
	stops = append(stops, op.stop)

	// Kamaji and Cluster API are other components with their own rights: they run as an
	// administrator, while the operator has only the RBAC the chart gives it.
	step("Starting Kamaji " + devenv.KamajiVersion + " (the real manager, with a TLS etcd DataStore; its control planes (kube-apiserver, kube-controller-manager, kube-scheduler) run as host processes), Cluster API " + devenv.ClusterAPIVersion + "'s real core and kubeadm bootstrap managers, stand-ins for Kamaji's Cluster API provider and for KubeVirt (a VM is namespaces with containerd and a kubelet), and a management node whose real cilium-agent " + cilium.Version + " networks and polices the VMs' virt-launcher pods")
	kamaji, err := devenv.StartRealKamaji(w.ctx, w.mgmt, devenv.RealKamajiOptions{Binary: kamajiBin, Proxy: proxy})
	if err != nil {
		return nil, err
	}
	stops = append(stops, kamaji.Stop)
	vms, stopNodes, err := w.startNodes(proxy, filepath.Dir(w.kubectl.kubeconfig))
	if err != nil {
		return nil, err
	}
	stops = append(stops, stopNodes)
	stopStandins, err := capistandin.StartWith(w.ctx, w.mgmt.Config, scheme, capistandin.Options{RealCore: true, VMs: vms})
	if err != nil {
		return nil, err
	}
	stops = append(stops, stopStandins)
	stopFlux, err := w.startFlux()
	if err != nil {
		return nil, err
	}
	stops = append(stops, stopFlux)
	step("The operator is running (controllers and admission webhook) as its ServiceAccount, with the chart's RBAC (its Deployment has no pods: the manager runs as a host process); the real Flux helm-controller runs too")
	return stop, w.kubectl.run("get", "deployment,serviceaccount,secret,poddisruptionbudget", "-n", operatorNS)
}

// provision applies the sample class and plane and follows the plane until it is Ready,
// reached at the name Kamaji writes.
func (w *walkthrough) provision() error {
	for _, sample := range []string{"tenant-namespace.yaml", "computeplaneclass.yaml", "computeplane.yaml"} {
		if err := w.kubectl.run("apply", "--server-side", "-f", filepath.Join(w.samples, sample)); err != nil {
			return err
		}
	}
	step("Watching the plane come up (Kamaji makes its TenantControlPlane; its kube-apiserver runs as a host process)")
	if err := watchProvisioning(w.ctx, w.mgmt.Client, w.key); err != nil {
		return err
	}
	if err := w.kubectl.run("get", "computeplanes", "-A"); err != nil {
		return err
	}
	plane := &cpv1.ComputePlane{}
	if err := w.mgmt.Client.Get(w.ctx, w.key, plane); err != nil {
		return err
	}
	w.infra = plane.Status.InfrastructureNamespace
	if err := w.kubectl.run("get", "-n", w.infra,
		"clusters.cluster.x-k8s.io,kamajicontrolplanes,tenantcontrolplanes,kubevirtclusters,kubevirtmachinetemplates,machinedeployments,helmreleases,ciliumnetworkpolicies"); err != nil {
		return err
	}
	if err := w.kubectl.run("wait", "--for=condition=Ready", "--timeout=60s", "-n", "tenant-demo", "computeplane/demo"); err != nil {
		return err
	}
	step("Kamaji wrote the plane's admin kubeconfig; the operator reaches the plane only at the in-cluster name it names")
	if err := reachedAtServiceName(w.ctx, w.mgmt.Client, w.infra, "demo"); err != nil {
		return err
	}
	return w.kubectl.run("get", "computeplane", "-n", "tenant-demo", "demo", "-o",
		`jsonpath={range .status.conditions[*]}{.type}{"\t"}{.status}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}`)
}

func (w *walkthrough) showBeacon() error {
	step("The Ready plane announces itself on its namespace (the capabilities design's discovery beacon; gone when the gate closes)")
	if err := w.kubectl.run("get", "namespace", "tenant-demo", "-L", cpv1.DefaultCapabilityLabel); err != nil {
		return err
	}
	return beaconIs(w.ctx, w.mgmt.Client, "tenant-demo", "demo")
}

// podSecurityRefusal is how Pod Security words a refusal by the restricted profile
// (k8s.io/pod-security-admission: `violates PodSecurity "restricted:<version>": ...`).
const podSecurityRefusal = `violates PodSecurity "restricted:`

// insidePlane shows the plane's hardened namespaces and checks that Pod Security, in the
// plane's own apiserver, refuses a pod nothing else there refuses: one that runs as root,
// which the baseline profile allows and neither the operator's pod-hardening policy
// (host namespaces, hostPath, privileged, added capabilities, host ports) nor the
// apiserver's flags (Kamaji passes --allow-privileged=true) would refuse. It goes to a
// placement namespace once its default ServiceAccount exists: before that the
// ServiceAccount admission plugin refuses every pod, which would say nothing of Pod
// Security.
func (w *walkthrough) insidePlane() error {
	step("Inside the plane (through its admin kubeconfig, which only the operator uses): hardened namespaces, which the plane's own kube-controller-manager fills as in any cluster")
	planeKubeconfig, err := adminKubeconfig(w.ctx, w.mgmt.Client, w.infra, filepath.Dir(w.kubectl.kubeconfig))
	if err != nil {
		return err
	}
	w.planeKubeconfig = planeKubeconfig
	plane := func(args ...string) []string { return append([]string{"--kubeconfig", planeKubeconfig}, args...) }
	if err := w.kubectl.run(plane("get", "namespaces", "-L", "pod-security.kubernetes.io/enforce")...); err != nil {
		return err
	}
	if err := w.kubectl.until(time.Minute, plane("get", "-n", "notebooks", "serviceaccount/default", "configmap/kube-root-ca.crt")...); err != nil {
		return fmt.Errorf("the plane's kube-controller-manager did not make the placement namespace's default ServiceAccount and kube-root-ca.crt: %w", err)
	}
	step("...so a pod there reaches Pod Security, which refuses one that runs as root (the baseline profile allows it; the plane's restricted one does not)")
	out, err := w.kubectl.output(plane("run", "root", "-n", "notebooks", "--image=busybox", "--dry-run=server",
		`--overrides={"spec":{"containers":[{"name":"root","image":"busybox","securityContext":{"runAsUser":0}}]}}`)...)
	if err := refusedByPodSecurity(out, err); err != nil {
		return fmt.Errorf("a pod that breaks the restricted profile in the plane: %w", err)
	}
	return nil
}

func (w *walkthrough) tenantGuards() error {
	step("A tenant (alice, bound to the chart's computeplane-tenant-edit role) cannot strip the plane's finalizer to skip its teardown")
	if err := w.kubectl.run("create", "rolebinding", "alice", "-n", "tenant-demo", "--clusterrole=computeplane-tenant-edit", "--user=alice"); err != nil {
		return err
	}
	if err := refused(w.kubectl.run("--as=alice", "patch", "-n", "tenant-demo", "computeplane/demo", "--type=json",
		`-p=[{"op":"remove","path":"/metadata/finalizers"}]`)); err != nil {
		return fmt.Errorf("stripping the finalizer as a tenant: %w", err)
	}
	step("The tenant namespace holds only the plane and the least-privilege applier kubeconfig (never the admin one)")
	if err := w.kubectl.run("get", "secrets", "-n", "tenant-demo", "-L", cpv1.FluxWatchLabel); err != nil {
		return err
	}
	step("...which is readable there (Flux reads it), but a copy under another name, that a Flux object would carry into the plane unheld, is refused: admission judges what a Secret holds, not its name")
	// Printed as a pipe, run as two commands: the credential itself is never printed.
	fmt.Printf("\n$ kubectl get secret -n tenant-demo demo-applier-kubeconfig -o jsonpath={.data.value} | (into Secret my-cluster, key config) | kubectl create --dry-run=server -f -\n")
	var value, out bytes.Buffer
	if err := w.kubectl.command(nil, &value, []string{"get", "secret", "-n", "tenant-demo", "demo-applier-kubeconfig", "-o", "jsonpath={.data.value}"}).Run(); err != nil {
		return fmt.Errorf("reading the applier kubeconfig: %w: %s", err, value.String())
	}
	copied := fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"my-cluster","namespace":"tenant-demo"},"data":{"config":%q}}`, strings.TrimSpace(value.String()))
	err := w.kubectl.command(strings.NewReader(copied), io.MultiWriter(os.Stdout, &out), []string{"create", "--dry-run=server", "-f", "-"}).Run()
	if err := refusedFor(out.String(), err, "carries a ComputePlane's credential"); err != nil {
		return fmt.Errorf("a copy of the applier kubeconfig: %w", err)
	}
	step("Nor may a tenant's kubeconfig name a file of the controller that loads it: Flux would read its own ServiceAccount token there and send it to the tenant's server")
	stolen := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"elsewhere","namespace":"tenant-demo"},"stringData":{"value":` +
		`"apiVersion: v1\nkind: Config\nclusters:\n- name: mine\n  cluster:\n    server: https://tenant.example.com\n` +
		`users:\n- name: me\n  user:\n    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n` +
		`contexts:\n- name: c\n  context: {cluster: mine, user: me}\ncurrent-context: c\n"}}`
	fmt.Printf("\n$ kubectl create --dry-run=server -f - <<< '%s'\n", stolen)
	out.Reset()
	err = w.kubectl.command(strings.NewReader(stolen), io.MultiWriter(os.Stdout, &out), []string{"create", "--dry-run=server", "-f", "-"}).Run()
	if err := refusedFor(out.String(), err, "users[me].tokenFile names a file or a program on the disk of the controller that reads it"); err != nil {
		return fmt.Errorf("a kubeconfig naming the controller's token file: %w", err)
	}
	return nil
}

// admissionChecks shows the API's documentation and what the operator's admission
// refuses: a second plane, and placement releases that would escape their plane.
func (w *walkthrough) admissionChecks() error {
	step("The API documents itself")
	if err := w.kubectl.run("explain", "computeplane.spec.nodeGroups"); err != nil {
		return err
	}
	step("A second plane in the same namespace is refused at admission")
	if err := refused(w.kubectl.run("create", "--dry-run=server", "-f", filepath.Join(w.samples, "computeplane-second.yaml"))); err != nil {
		return fmt.Errorf("a second plane: %w", err)
	}
	step("A placement release is routed into the plane at admission (Flux would apply it there, as the deployer)")
	if err := w.kubectl.run("create", "--dry-run=server", "-f", filepath.Join(w.samples, "placement-release.yaml"), "-o",
		`jsonpath=kubeConfig={.spec.kubeConfig.secretRef.name} serviceAccountName={.spec.serviceAccountName} targetNamespace={.spec.targetNamespace} storageNamespace={.spec.storageNamespace} finalizers={.metadata.finalizers}{"\n"}`); err != nil {
		return fmt.Errorf("a placement release: %w", err)
	}
	for _, c := range []struct{ title, what, release, because string }{
		{"...and one that asks to be applied as someone else is refused", "a placement release as another identity",
			`{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{"name":"sneaky","namespace":"tenant-demo","labels":{"computeplane.cozystack.io/placement":"ComputePlane"}},"spec":{"interval":"10m","chartRef":{"kind":"OCIRepository","name":"jupyter","namespace":"cozy-public"},"serviceAccountName":"default"}}`,
			`spec.serviceAccountName: Unsupported value: "default"`},
		{"...so is one whose chart is another tenant's source (the class allows cozy-public alone)", "a placement release with another tenant's chart source",
			`{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{"name":"borrowed","namespace":"tenant-demo","labels":{"computeplane.cozystack.io/placement":"ComputePlane"}},"spec":{"interval":"10m","chartRef":{"kind":"OCIRepository","name":"private","namespace":"tenant-other"}}}`,
			`spec.chartRef.namespace: Unsupported value: "tenant-other"`},
		{"...and an unlabelled release routed by hand with the plane's credential, to skip the gate", "an unlabelled release naming the applier kubeconfig",
			`{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{"name":"by-hand","namespace":"tenant-demo"},"spec":{"interval":"10m","chartRef":{"kind":"OCIRepository","name":"jupyter","namespace":"cozy-public"},"kubeConfig":{"secretRef":{"name":"demo-applier-kubeconfig","key":"value"}},"serviceAccountName":"computeplane-deployer"}}`,
			`spec.kubeConfig.secretRef.name: Forbidden: names ComputePlane demo's applier kubeconfig`},
		{"...and one that would keep Flux's controllers, shared by every tenant, busy every second (the class's minInterval is 30s)", "a placement release at interval 1s",
			`{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{"name":"hot","namespace":"tenant-demo","labels":{"computeplane.cozystack.io/placement":"ComputePlane"}},"spec":{"interval":"1s","chartRef":{"kind":"OCIRepository","name":"jupyter","namespace":"cozy-public"}}}`,
			`spec.interval: Invalid value: "1s": must be at least 30s`},
		{"...and one that asks Helm to keep every object in the plane past its uninstall", "a placement release keeping everything",
			`{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{"name":"kept","namespace":"tenant-demo","labels":{"computeplane.cozystack.io/placement":"ComputePlane"}},"spec":{"interval":"10m","chartRef":{"kind":"OCIRepository","name":"jupyter","namespace":"cozy-public"},"commonMetadata":{"annotations":{"helm.sh/resource-policy":"keep"}}}}`,
			`spec.commonMetadata.annotations[helm.sh/resource-policy]: Forbidden`},
	} {
		step(c.title)
		out, err := w.kubectl.stdinOutput(c.release, "create", "--dry-run=server", "-f", "-")
		if err := refusedFor(out, err, c.because); err != nil {
			return fmt.Errorf("%s: %w", c.what, err)
		}
	}
	return nil
}

// grantsAndReconcile walks a per-Service grant through both sides, then forces a
// reconcile the Flux way and waits for the plane to acknowledge it.
func (w *walkthrough) grantsAndReconcile() error {
	step("A per-Service grant needs both sides: the plane asks for postgres (spec.serviceAccess); the Service appears")
	if err := showGrants(w.ctx, w.mgmt.Client, w.kubectl.run, w.key); err != nil {
		return err
	}
	step("Forcing a reconcile the Flux way")
	stamp := fmt.Sprint(time.Now().Unix())
	if err := w.kubectl.run("annotate", "--overwrite", "-n", "tenant-demo", "computeplane/demo", "reconcile.fluxcd.io/requestedAt="+stamp); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p := &cpv1.ComputePlane{}
		if err := w.mgmt.Client.Get(ctx, w.key, p); err != nil {
			return false, err
		}
		return p.Status.LastHandledReconcileAt == stamp, nil
	}); err != nil {
		return fmt.Errorf("the reconcile request was not acknowledged: %w", err)
	}
	return w.kubectl.run("get", "computeplane", "-n", "tenant-demo", "demo", "-o", "jsonpath={.status.lastHandledReconcileAt}{\"\\n\"}")
}

// teardown shows the deletion protection, then deletes the plane and follows its
// teardown until it is gone and its beacon with it.
func (w *walkthrough) teardown() error {
	step("Deletion protection: a plane a placement release still runs in cannot be deleted; its owner asks for the release to be uninstalled with it")
	if err := w.kubectl.run("create", "-f", filepath.Join(w.samples, "placement-release.yaml")); err != nil {
		return err
	}
	if err := refused(w.kubectl.run("delete", "--dry-run=server", "-n", "tenant-demo", "computeplane/demo")); err != nil {
		return fmt.Errorf("deleting a plane a release runs in: %w", err)
	}
	if err := w.kubectl.run("annotate", "-n", "tenant-demo", "computeplane/demo", cpv1.UninstallAnnotation+"=the demo is over"); err != nil {
		return err
	}
	step("Deleting the plane: the teardown runs its stages in order (each a Reconciling reason)")
	if err := w.kubectl.run("delete", "-n", "tenant-demo", "computeplane/demo", "--wait=false"); err != nil {
		return err
	}
	if err := watchTeardown(w.ctx, w.mgmt.Client, w.key); err != nil {
		return err
	}
	return beaconIs(w.ctx, w.mgmt.Client, "tenant-demo", "")
}

// kubectl runs the pinned kubectl against the management cluster (a plane with
// --kubeconfig), printing each command and its output as the walkthrough's.
type kubectl struct {
	ctx        context.Context
	bin        string
	kubeconfig string
}

func (k kubectl) command(stdin io.Reader, out io.Writer, args []string) *exec.Cmd {
	cmd := exec.CommandContext(k.ctx, k.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, out, out
	return cmd
}

func (k kubectl) run(args ...string) error {
	fmt.Printf("\n$ kubectl %s\n", join(args))
	return k.command(nil, os.Stdout, args).Run()
}

// stdinOutput is stdin, also returning what the command printed.
func (k kubectl) stdinOutput(stdin string, args ...string) (string, error) {
	fmt.Printf("\n$ echo '%s' | kubectl %s\n", stdin, join(args))
	var out bytes.Buffer
	err := k.command(strings.NewReader(stdin), io.MultiWriter(os.Stdout, &out), args).Run()
	return out.String(), err
}

// piped is for a stream the walkthrough already printed the command of.
func (k kubectl) piped(stdin []byte, args ...string) error {
	return k.command(bytes.NewReader(stdin), os.Stdout, args).Run()
}

// until runs the command, quietly, until it succeeds or timeout passes, then prints it and
// its output as run does (kubectl wait --for=create refuses a name not there yet).
func (k kubectl) until(timeout time.Duration, args ...string) error {
	fmt.Printf("\n$ kubectl %s  # until it succeeds, %s at most\n", join(args), timeout)
	var out bytes.Buffer
	err := wait.PollUntilContextTimeout(k.ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		out.Reset()
		return k.command(nil, &out, args).Run() == nil, nil
	})
	fmt.Print(out.String())
	return err
}

// output is run, also returning what the command printed (its stdout and stderr).
func (k kubectl) output(args ...string) (string, error) {
	fmt.Printf("\n$ kubectl %s\n", join(args))
	var out bytes.Buffer
	err := k.command(nil, io.MultiWriter(os.Stdout, &out), args).Run()
	return out.String(), err
}

// reachedAtServiceName shows what Kamaji made for the plane and checks that the admin
// kubeconfig the operator uses names the plane's in-cluster Service, as Kamaji writes it:
// the plane is Ready, so the operator reached its API there (nothing else routes it).
func reachedAtServiceName(ctx context.Context, c client.Client, infra, name string) error {
	tcp := &kamajiv1alpha1.TenantControlPlane{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: infra, Name: name}, tcp); err != nil {
		return err
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: infra, Name: tcp.Status.KubeConfig.Admin.SecretName}, secret); err != nil {
		return fmt.Errorf("Kamaji's admin kubeconfig: %w", err)
	}
	kc, err := clientcmd.Load(secret.Data[render.AdminKubeconfigKey])
	if err != nil {
		return fmt.Errorf("Kamaji's admin kubeconfig, key %s: %w", render.AdminKubeconfigKey, err)
	}
	want := fmt.Sprintf("https://%s.%s.svc:6443", name, infra)
	var servers []string
	for _, cl := range kc.Clusters {
		servers = append(servers, cl.Server)
	}
	status := "unknown"
	if st := tcp.Status.Kubernetes.Version.Status; st != nil {
		status = string(*st)
	}
	fmt.Printf("    TenantControlPlane %s/%s: %s, endpoint %s, admin kubeconfig Secret %s (key %s: server %s)\n",
		infra, name, status, tcp.Status.ControlPlaneEndpoint, secret.Name, render.AdminKubeconfigKey, strings.Join(servers, ", "))
	if len(servers) != 1 || servers[0] != want {
		return fmt.Errorf("the admin kubeconfig names %v, not the Service name %s Kamaji writes", servers, want)
	}
	return nil
}

// beaconIs checks the namespace's capability label (want "": none), waiting a moment
// for it.
func beaconIs(ctx context.Context, c client.Client, namespace, want string) error {
	var got string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
			return false, err
		}
		got = ns.Labels[cpv1.DefaultCapabilityLabel]
		return got == want, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s: %s=%q, want %q: %w", namespace, cpv1.DefaultCapabilityLabel, got, want, err)
	}
	fmt.Printf("    %s: %s=%q, as it must be\n", namespace, cpv1.DefaultCapabilityLabel, got)
	return nil
}

// watchProvisioning prints each change of the plane's Provisioned condition until it is
// True.
func watchProvisioning(ctx context.Context, c client.Client, key client.ObjectKey) error {
	last := ""
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p := &cpv1.ComputePlane{}
		if err := c.Get(ctx, key, p); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		cond := apimeta.FindStatusCondition(p.Status.Conditions, cpv1.ProvisionedCondition)
		if cond == nil {
			return false, nil
		}
		if line := fmt.Sprintf("Provisioned=%s %s: %s", cond.Status, cond.Reason, cond.Message); line != last {
			fmt.Println("   ", line)
			last = line
		}
		return cond.Status == "True", nil
	})
}

// refused turns the result of a kubectl command that must be refused into an error
// when it was accepted: a safety property the demo shows must hold, or the demo fails.
func refused(err error) error {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return errors.New("accepted; it must be refused")
	case errors.As(err, &exit):
		fmt.Println("    (refused, as it must be)")
		return nil
	default:
		return err
	}
}

// refusedFor is refused for a refusal that must say why: a refusal for another reason
// proves nothing about the rule the walkthrough shows.
func refusedFor(out string, err error, why string) error {
	if err := refused(err); err != nil {
		return err
	}
	if !strings.Contains(out, why) {
		return fmt.Errorf("refused, but not for its reason (no %q in %q)", why, strings.TrimSpace(out))
	}
	return nil
}

// refusedByPodSecurity is refused for a refusal that must be Pod Security's: what the
// command printed must carry Pod Security's own words. A refusal for another reason (no
// ServiceAccount yet, a quota not computed yet, a policy of the operator's) says nothing
// of Pod Security, and fails the demo as an acceptance does.
func refusedByPodSecurity(out string, err error) error {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return errors.New("accepted; it must be refused")
	case !errors.As(err, &exit):
		return err
	case !strings.Contains(out, podSecurityRefusal):
		return fmt.Errorf("refused, but not by Pod Security (no %s in %q)", podSecurityRefusal, strings.TrimSpace(out))
	}
	fmt.Println("    (refused by Pod Security's restricted profile, as it must be)")
	return nil
}

// watchTeardown prints each teardown stage the plane shows until it is gone.
func watchTeardown(ctx context.Context, c client.Client, key client.ObjectKey) error {
	last := ""
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p := &cpv1.ComputePlane{}
		if err := c.Get(ctx, key, p); err != nil {
			if client.IgnoreNotFound(err) == nil {
				fmt.Println("    the ComputePlane is gone")
				return true, nil
			}
			return false, err
		}
		if rec := apimeta.FindStatusCondition(p.Status.Conditions, cpv1.ReconcilingCondition); rec != nil && rec.Reason != last {
			fmt.Printf("    Reconciling=%s: %s\n", rec.Reason, rec.Message)
			last = rec.Reason
		}
		return false, nil
	})
}

// adminKubeconfig copies the plane's admin kubeconfig (Kamaji's Secret in the
// infrastructure namespace) to a file for the walkthrough.
func adminKubeconfig(ctx context.Context, c client.Client, infra, dir string) (string, error) {
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: infra, Name: "demo-admin-kubeconfig"}, secret); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "plane-admin")
	return path, os.WriteFile(path, secret.Data["super-admin.svc"], 0o600)
}

func writeKubeconfig(mgmt *devenv.Cluster) (string, func(), error) {
	user, err := mgmt.Env.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", nil, err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "computeplane-demo-")
	if err != nil {
		return "", nil, err
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", nil, err
	}
	return path, func() { _ = os.RemoveAll(dir) }, nil
}

func step(s string) { fmt.Printf("\n==> %s\n", s) }

// join renders args as a shell command a reader can paste.
func join(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " \t\"{}$[]*") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " ")
}
