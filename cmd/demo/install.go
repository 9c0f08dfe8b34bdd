package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/internal/devenv"
)

const (
	operatorNS = devenv.OperatorNamespace
	deployment = "computeplane-controller-manager"
	certSecret = "computeplane-webhook-server-cert"
)

// operatorInstall is the manager the demo runs from the chart's manifests.
type operatorInstall struct {
	dir  string
	cmd  *exec.Cmd
	log  *os.File
	done chan error
}

// installOperator installs the operator the way a platform team does, from the chart
// (`helm template | kubectl apply`, with the chart's self-signed webhook certificate),
// and runs the manager binary exactly as the chart's Deployment would: its arguments,
// its ServiceAccount's token, the certificate from the Secret it mounts. Only what a
// kubelet and kube-proxy would do is done by hand here: the process runs on this host,
// so the webhook configurations call it at 127.0.0.1 instead of through the Service,
// and its listeners move to free local ports.
func installOperator(ctx context.Context, mgmt *devenv.Cluster, root string, kubectl func(...string) error,
	kubectlPiped func([]byte, ...string) error, verbose bool) (*operatorInstall, error) {
	helm, err := devenv.Helm(root)
	if err != nil {
		return nil, err
	}
	chart := devenv.ChartDir(root)
	if err := kubectl("create", "namespace", operatorNS); err != nil {
		return nil, err
	}
	if err := kubectl("label", "namespace", operatorNS, "pod-security.kubernetes.io/enforce=restricted"); err != nil {
		return nil, err
	}
	args := []string{"template", "computeplane", chart, "--namespace", operatorNS,
		"--set", "certManager.enabled=false", "--set", "webhook.selfSigned.ipAddresses={127.0.0.1}"}
	fmt.Printf("\n$ helm %s | kubectl apply --server-side -f -\n", join(relative(root, args)))
	rendered, err := exec.CommandContext(ctx, helm, args...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("helm template: %w: %s", err, exit.Stderr)
		}
		return nil, err
	}
	if err := kubectlPiped(rendered, "apply", "--server-side", "-f", "-"); err != nil {
		return nil, err
	}
	if err := kubectl("wait", "--for=condition=Established", "--timeout=30s",
		"crd/computeplanes.computeplane.cozystack.io", "crd/computeplaneclasses.computeplane.cozystack.io"); err != nil {
		return nil, err
	}

	dir, err := os.MkdirTemp("", "computeplane-manager-")
	if err != nil {
		return nil, err
	}
	op := &operatorInstall{dir: dir, done: make(chan error, 1)}
	if err := op.start(ctx, mgmt, root, rendered, verbose); err != nil {
		op.stop()
		return nil, err
	}
	return op, nil
}

func (op *operatorInstall) start(ctx context.Context, mgmt *devenv.Cluster, root string, rendered []byte, verbose bool) error {
	webhookAddr, err := devenv.FreeAddr()
	if err != nil {
		return err
	}
	_, webhookPort, _ := net.SplitHostPort(webhookAddr)
	probeAddr, err := devenv.FreeAddr()
	if err != nil {
		return err
	}
	metricsAddr, err := devenv.FreeAddr()
	if err != nil {
		return err
	}
	step("Standing in for the kubelet and kube-proxy: the manager runs on this host from the Deployment's spec, and the webhooks call it at 127.0.0.1:" + webhookPort)
	if err := pointWebhooksAt(ctx, mgmt.Client, rendered, "https://"+webhookAddr); err != nil {
		return err
	}
	dep := &appsv1.Deployment{}
	if err := mgmt.Client.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: deployment}, dep); err != nil {
		return err
	}
	certDir := filepath.Join(op.dir, "serving-certs")
	if err := writeServingCert(ctx, mgmt.Client, certDir); err != nil {
		return err
	}
	kubeconfig := filepath.Join(op.dir, "kubeconfig")
	if err := writeServiceAccountKubeconfig(ctx, mgmt, dep.Spec.Template.Spec.ServiceAccountName, kubeconfig); err != nil {
		return err
	}

	bin := filepath.Join(op.dir, "manager")
	fmt.Println("\n$ go build -o manager ./cmd/manager")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/manager")
	build.Dir, build.Stdout, build.Stderr = root, os.Stdout, os.Stderr
	build.Env = devenv.OutsideEnv() // a module it fetches is not behind the plane proxy
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the manager: %w", err)
	}
	args := localArgs(dep.Spec.Template.Spec.Containers[0].Args, map[string]string{
		"--health-probe-bind-address": probeAddr,
		"--metrics-bind-address":      metricsAddr,
		"--webhook-cert-dir":          certDir,
	})
	args = append(args, "--webhook-port="+webhookPort, "--leader-election-namespace="+operatorNS,
		// The walkthrough's pace: a plane that waits looks again within seconds.
		"--requeue-interval=5s", "--plane-timeout=5s", "--plane-unreachable-grace=10s")
	fmt.Printf("\n$ KUBECONFIG=<token of ServiceAccount %s/%s> manager %s\n", operatorNS, dep.Spec.Template.Spec.ServiceAccountName, join(args))

	op.cmd = exec.Command(bin, args...)
	op.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if verbose {
		op.cmd.Stdout, op.cmd.Stderr = os.Stderr, os.Stderr
	} else {
		if op.log, err = os.Create(filepath.Join(op.dir, "manager.log")); err != nil {
			return err
		}
		op.cmd.Stdout, op.cmd.Stderr = op.log, op.log
	}
	if err := op.cmd.Start(); err != nil {
		return err
	}
	go func() { op.done <- op.cmd.Wait() }()

	// Ready as the Deployment's readiness probe sees it: the webhook server is serving.
	err = devenv.WaitReadyz(ctx, probeAddr, 100*time.Millisecond, 60*time.Second, func() error {
		select {
		case err := <-op.done:
			op.done <- err
			return fmt.Errorf("the manager exited: %v%s", err, op.logTail())
		default:
			return nil
		}
	})
	if err != nil {
		return fmt.Errorf("the manager did not become ready: %w%s", err, op.logTail())
	}
	return nil
}

// localArgs replaces the values of the given --flag=value arguments.
func localArgs(args []string, replace map[string]string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := replace[name]; ok {
			a = name + "=" + v
		}
		out = append(out, a)
	}
	return out
}

// pointWebhooksAt replaces the Service reference of every webhook the chart installed
// with a URL (the same path, and the chart's CA bundle).
func pointWebhooksAt(ctx context.Context, c client.Client, rendered []byte, base string) error {
	objs, err := devenv.ParseObjects(rendered)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.GetKind() != "ValidatingWebhookConfiguration" && o.GetKind() != "MutatingWebhookConfiguration" {
			continue
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKey{Name: o.GetName()}, live); err != nil {
			return err
		}
		hooks, _, _ := unstructured.NestedSlice(live.Object, "webhooks")
		for _, h := range hooks {
			cc := h.(map[string]any)["clientConfig"].(map[string]any)
			path, _, _ := unstructured.NestedString(cc, "service", "path")
			delete(cc, "service")
			cc["url"] = base + path
		}
		if err := unstructured.SetNestedSlice(live.Object, hooks, "webhooks"); err != nil {
			return err
		}
		if err := c.Update(ctx, live); err != nil {
			return err
		}
		fmt.Printf("    %s %s → %s\n", o.GetKind(), o.GetName(), base)
	}
	return nil
}

// writeServingCert writes the chart's webhook certificate where the Deployment mounts it.
func writeServingCert(ctx context.Context, c client.Client, dir string) error {
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: certSecret}, secret); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, k := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, k), secret.Data[k], 0o600); err != nil {
			return err
		}
	}
	return nil
}

// writeServiceAccountKubeconfig writes a kubeconfig with a token of the operator's
// ServiceAccount, as the kubelet projects one into the pod: the manager authenticates
// as that ServiceAccount and has exactly the RBAC the chart bound to it.
func writeServiceAccountKubeconfig(ctx context.Context, mgmt *devenv.Cluster, sa, path string) error {
	cs, err := kubernetes.NewForConfig(mgmt.Config)
	if err != nil {
		return err
	}
	expiry := int64(2 * time.Hour / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(operatorNS).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("a token for ServiceAccount %s/%s: %w", operatorNS, sa, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["management"] = &clientcmdapi.Cluster{Server: mgmt.Config.Host, CertificateAuthorityData: mgmt.Config.CAData}
	cfg.AuthInfos["operator"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["operator"] = &clientcmdapi.Context{Cluster: "management", AuthInfo: "operator"}
	cfg.CurrentContext = "operator"
	return clientcmd.WriteToFile(*cfg, path)
}

// logTail is the end of the manager's log, for an error message.
func (op *operatorInstall) logTail() string {
	if op.log == nil {
		return ""
	}
	data, err := os.ReadFile(op.log.Name())
	if err != nil {
		return ""
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return "\nthe manager's log ends with:\n" + string(data)
}

// stop stops the manager as the kubelet would (SIGTERM, then SIGKILL after the grace)
// and removes its files.
func (op *operatorInstall) stop() {
	if op.cmd != nil && op.cmd.Process != nil {
		_ = op.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-op.done:
		case <-time.After(30 * time.Second):
			_ = op.cmd.Process.Kill()
			<-op.done
		}
	}
	if op.log != nil {
		_ = op.log.Close()
	}
	_ = os.RemoveAll(op.dir)
}

// relative shortens paths under root for printing.
func relative(root string, args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.TrimPrefix(a, root+string(os.PathSeparator))
	}
	return out
}
