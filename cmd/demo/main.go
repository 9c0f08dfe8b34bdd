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
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
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
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme, Bare: true})
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
	kubectlBin := filepath.Join(mgmt.Env.BinaryAssetsDirectory, "kubectl")
	kubectl := func(args ...string) error {
		fmt.Printf("\n$ kubectl %s\n", join(args))
		cmd := exec.CommandContext(ctx, kubectlBin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		return cmd.Run()
	}
	kubectlStdin := func(stdin string, args ...string) error {
		fmt.Printf("\n$ echo '%s' | kubectl %s\n", stdin, join(args))
		cmd := exec.CommandContext(ctx, kubectlBin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		cmd.Stdin = strings.NewReader(stdin)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		return cmd.Run()
	}
	// For a stream the walkthrough already printed the command of.
	kubectlPiped := func(stdin []byte, args ...string) error {
		cmd := exec.CommandContext(ctx, kubectlBin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		cmd.Stdin = bytes.NewReader(stdin)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		return cmd.Run()
	}

	step("Installing the operator from its Helm chart (config/helm/computeplane, which renders exactly config/default)")
	op, err := installOperator(ctx, mgmt, root, kubectl, kubectlPiped, verbose)
	if err != nil {
		return err
	}
	defer op.stop()

	// Kamaji and Cluster API are other components with their own rights: they run as an
	// administrator, while the operator has only the RBAC the chart gives it.
	step("Starting Kamaji " + devenv.KamajiVersion + " (the real manager, with a TLS etcd DataStore; its control planes run as host processes) and stand-ins for its Cluster API provider and Cluster API core")
	kamaji, err := devenv.StartRealKamaji(ctx, mgmt, devenv.RealKamajiOptions{Binary: kamajiBin, Proxy: proxy})
	if err != nil {
		return err
	}
	defer kamaji.Stop()
	stopStandins, err := capistandin.Start(ctx, mgmt.Config, scheme)
	if err != nil {
		return err
	}
	defer stopStandins()
	step("The operator is running (controllers and admission webhook) as its ServiceAccount, with the chart's RBAC; the Deployment itself has no pods: no kubelet here")
	if err := kubectl("get", "deployment,serviceaccount,secret,poddisruptionbudget", "-n", operatorNS); err != nil {
		return err
	}

	samples := filepath.Join(root, "config", "samples")
	if err := kubectl("apply", "--server-side", "-f", filepath.Join(samples, "tenant-namespace.yaml")); err != nil {
		return err
	}
	if err := kubectl("apply", "--server-side", "-f", filepath.Join(samples, "computeplaneclass.yaml")); err != nil {
		return err
	}
	if err := kubectl("apply", "--server-side", "-f", filepath.Join(samples, "computeplane.yaml")); err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: "tenant-demo", Name: "demo"}
	step("Watching the plane come up (Kamaji makes its TenantControlPlane; its kube-apiserver runs as a host process)")
	if err := watchProvisioning(ctx, mgmt.Client, key); err != nil {
		return err
	}
	if err := kubectl("get", "computeplanes", "-A"); err != nil {
		return err
	}
	plane := &cpv1.ComputePlane{}
	if err := mgmt.Client.Get(ctx, key, plane); err != nil {
		return err
	}
	infra := plane.Status.InfrastructureNamespace
	if err := kubectl("get", "-n", infra,
		"clusters.cluster.x-k8s.io,kamajicontrolplanes,tenantcontrolplanes,kubevirtclusters,kubevirtmachinetemplates,machinedeployments,helmreleases,ciliumnetworkpolicies"); err != nil {
		return err
	}
	if err := kubectl("wait", "--for=condition=Ready", "--timeout=60s", "-n", "tenant-demo", "computeplane/demo"); err != nil {
		return err
	}
	step("Kamaji wrote the plane's admin kubeconfig; the operator reaches the plane only at the in-cluster name it names")
	if err := reachedAtServiceName(ctx, mgmt.Client, infra, "demo"); err != nil {
		return err
	}
	if err := kubectl("get", "computeplane", "-n", "tenant-demo", "demo", "-o",
		`jsonpath={range .status.conditions[*]}{.type}{"\t"}{.status}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}`); err != nil {
		return err
	}

	step("The Ready plane announces itself on its namespace (the capabilities design's discovery beacon; gone when the gate closes)")
	if err := kubectl("get", "namespace", "tenant-demo", "-L", cpv1.DefaultCapabilityLabel); err != nil {
		return err
	}
	if err := beaconIs(ctx, mgmt.Client, "tenant-demo", "demo"); err != nil {
		return err
	}

	step("Inside the plane (through its admin kubeconfig, which only the operator uses): hardened namespaces, and a privileged pod refused by the plane's own apiserver")
	planeKubeconfig, err := adminKubeconfig(ctx, mgmt.Client, infra, filepath.Dir(kubeconfig))
	if err != nil {
		return err
	}
	if err := kubectl("--kubeconfig", planeKubeconfig, "get", "namespaces", "-L", "pod-security.kubernetes.io/enforce"); err != nil {
		return err
	}
	if err := refused(kubectl("--kubeconfig", planeKubeconfig, "run", "escape", "-n", "notebooks", "--image=busybox", "--dry-run=server",
		`--overrides={"spec":{"containers":[{"name":"escape","image":"busybox","securityContext":{"privileged":true}}]}}`)); err != nil {
		return fmt.Errorf("a privileged pod in the plane: %w", err)
	}

	step("A tenant (alice, bound to the chart's computeplane-tenant-edit role) cannot strip the plane's finalizer to skip its teardown")
	if err := kubectl("create", "rolebinding", "alice", "-n", "tenant-demo", "--clusterrole=computeplane-tenant-edit", "--user=alice"); err != nil {
		return err
	}
	if err := refused(kubectl("--as=alice", "patch", "-n", "tenant-demo", "computeplane/demo", "--type=json",
		`-p=[{"op":"remove","path":"/metadata/finalizers"}]`)); err != nil {
		return fmt.Errorf("stripping the finalizer as a tenant: %w", err)
	}

	step("The tenant namespace holds only the plane and the least-privilege applier kubeconfig (never the admin one)")
	if err := kubectl("get", "secrets", "-n", "tenant-demo", "-L", "reconcile.fluxcd.io/watch"); err != nil {
		return err
	}

	step("The API documents itself")
	if err := kubectl("explain", "computeplane.spec.nodeGroups"); err != nil {
		return err
	}

	step("A second plane in the same namespace is refused at admission")
	if err := refused(kubectl("create", "--dry-run=server", "-f", filepath.Join(samples, "computeplane-second.yaml"))); err != nil {
		return fmt.Errorf("a second plane: %w", err)
	}

	step("A placement release is routed into the plane at admission (Flux would apply it there, as the deployer)")
	release := filepath.Join(samples, "placement-release.yaml")
	if err := kubectl("create", "--dry-run=server", "-f", release, "-o",
		`jsonpath=kubeConfig={.spec.kubeConfig.secretRef.name} serviceAccountName={.spec.serviceAccountName} targetNamespace={.spec.targetNamespace} storageNamespace={.spec.storageNamespace} finalizers={.metadata.finalizers}{"\n"}`); err != nil {
		return fmt.Errorf("a placement release: %w", err)
	}
	step("...and one that asks to be applied as someone else is refused")
	if err := refused(kubectlStdin(`{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{"name":"sneaky","namespace":"tenant-demo","labels":{"computeplane.cozystack.io/placement":"ComputePlane"}},"spec":{"interval":"10m","chartRef":{"kind":"OCIRepository","name":"jupyter","namespace":"cozy-public"},"serviceAccountName":"default"}}`,
		"create", "--dry-run=server", "-f", "-")); err != nil {
		return fmt.Errorf("a placement release as another identity: %w", err)
	}
	step("...so is one whose chart is another tenant's source (the class allows cozy-public alone)")
	if err := refused(kubectlStdin(`{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{"name":"borrowed","namespace":"tenant-demo","labels":{"computeplane.cozystack.io/placement":"ComputePlane"}},"spec":{"interval":"10m","chartRef":{"kind":"OCIRepository","name":"private","namespace":"tenant-other"}}}`,
		"create", "--dry-run=server", "-f", "-")); err != nil {
		return fmt.Errorf("a placement release with another tenant's chart source: %w", err)
	}
	step("...and an unlabelled release routed by hand with the plane's credential, to skip the gate")
	if err := refused(kubectlStdin(`{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{"name":"by-hand","namespace":"tenant-demo"},"spec":{"interval":"10m","chartRef":{"kind":"OCIRepository","name":"jupyter","namespace":"cozy-public"},"kubeConfig":{"secretRef":{"name":"demo-applier-kubeconfig","key":"value"}},"serviceAccountName":"computeplane-deployer"}}`,
		"create", "--dry-run=server", "-f", "-")); err != nil {
		return fmt.Errorf("an unlabelled release naming the applier kubeconfig: %w", err)
	}

	step("A per-Service grant needs both sides: the plane asks for postgres (spec.serviceAccess); the Service appears")
	if err := showGrants(ctx, mgmt.Client, kubectl, key); err != nil {
		return err
	}

	step("Forcing a reconcile the Flux way")
	stamp := fmt.Sprint(time.Now().Unix())
	if err := kubectl("annotate", "--overwrite", "-n", "tenant-demo", "computeplane/demo", "reconcile.fluxcd.io/requestedAt="+stamp); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p := &cpv1.ComputePlane{}
		if err := mgmt.Client.Get(ctx, key, p); err != nil {
			return false, err
		}
		return p.Status.LastHandledReconcileAt == stamp, nil
	}); err != nil {
		return fmt.Errorf("the reconcile request was not acknowledged: %w", err)
	}
	if err := kubectl("get", "computeplane", "-n", "tenant-demo", "demo", "-o", "jsonpath={.status.lastHandledReconcileAt}{\"\\n\"}"); err != nil {
		return err
	}

	if stay {
		step("Still running. In another shell: export KUBECONFIG=" + kubeconfig + " HTTPS_PROXY=" + proxy.URL().String() +
			" (the proxy reaches planes at the names Kamaji writes); Ctrl-C here to stop and clean up")
		<-ctx.Done()
		return nil
	}

	step("Deletion protection: a plane a placement release still runs in cannot be deleted; its owner asks for the release to be uninstalled with it")
	if err := kubectl("create", "-f", release); err != nil {
		return err
	}
	if err := refused(kubectl("delete", "--dry-run=server", "-n", "tenant-demo", "computeplane/demo")); err != nil {
		return fmt.Errorf("deleting a plane a release runs in: %w", err)
	}
	if err := kubectl("annotate", "-n", "tenant-demo", "computeplane/demo", cpv1.UninstallAnnotation+"=the demo is over"); err != nil {
		return err
	}

	step("Deleting the plane: the teardown runs its stages in order (each a Reconciling reason)")
	if err := kubectl("delete", "-n", "tenant-demo", "computeplane/demo", "--wait=false"); err != nil {
		return err
	}
	if err := watchTeardown(ctx, mgmt.Client, key); err != nil {
		return err
	}
	return beaconIs(ctx, mgmt.Client, "tenant-demo", "")
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
