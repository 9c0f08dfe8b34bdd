package operatortest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cozystack/computeplane/test/testenv"
)

// Process is the shipped manager binary (cmd/manager) running as its own process against
// a testenv management cluster, as the operator's ServiceAccount: what the Deployment
// runs. A fault test can SIGKILL it mid-stage, and a benchmark can read its memory
// without the test's own allocations mixed in.
type Process struct {
	cmd *exec.Cmd
	// MetricsAddr serves /metrics over plain HTTP (--metrics-secure=false).
	MetricsAddr string
	// Log is the file the manager's output goes to.
	Log  string
	done chan error
}

// ProcessOptions shape a manager process.
type ProcessOptions struct {
	// Args are more flags (`--requeue-interval=2s`, say), after the ones Process sets.
	Args []string
	// Webhooks serves the admission webhooks where the management Cluster's webhook
	// configurations point (ManagementOptions.Webhooks).
	Webhooks bool
}

var build struct {
	once sync.Once
	bin  string
	err  error
}

// ManagerBinary builds cmd/manager once per test binary and returns its path.
func ManagerBinary() (string, error) {
	build.once.Do(func() {
		root, err := testenv.RepoRoot()
		if err != nil {
			build.err = err
			return
		}
		dir, err := os.MkdirTemp("", "computeplane-manager-")
		if err != nil {
			build.err = err
			return
		}
		build.bin = filepath.Join(dir, "manager")
		cmd := exec.Command("go", "build", "-o", build.bin, "./cmd/manager")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("building cmd/manager: %v\n%s", err, out)
		}
	})
	return build.bin, build.err
}

// StartProcess starts the manager binary with leader election (in the operator's
// namespace, as deployed) and returns once it is ready: its caches synced (the manager's
// readiness is served only after) and, with webhooks, its webhook server serving.
func StartProcess(ctx context.Context, mgmt *testenv.Cluster, o ProcessOptions) (*Process, error) {
	bin, err := ManagerBinary()
	if err != nil {
		return nil, err
	}
	if mgmt.OperatorConfig == nil {
		return nil, errors.New("the management cluster has no operator identity (started Bare)")
	}
	dir, err := os.MkdirTemp("", "computeplane-process-")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(mgmt, kubeconfig); err != nil {
		return nil, err
	}
	metricsAddr, err := testenv.FreeAddr()
	if err != nil {
		return nil, err
	}
	probeAddr, err := testenv.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address=" + probeAddr,
		"--leader-elect=true", "--leader-election-namespace=" + testenv.OperatorNamespace,
	}
	if o.Webhooks {
		w := mgmt.Env.WebhookInstallOptions
		args = append(args, "--enable-webhooks=true", "--webhook-port="+strconv.Itoa(w.LocalServingPort),
			"--webhook-cert-dir="+w.LocalServingCertDir)
	} else {
		args = append(args, "--enable-webhooks=false")
	}
	p := &Process{MetricsAddr: metricsAddr, Log: filepath.Join(dir, "manager.log"), done: make(chan error, 1)}
	log, err := os.Create(p.Log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, append(args, o.Args...)...)
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		_ = log.Close()
		return nil, err
	}
	go func() { p.done <- p.cmd.Wait(); _ = log.Close() }()

	readyz := "http://" + probeAddr + "/readyz"
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-p.done:
			p.done <- err
			return false, fmt.Errorf("the manager exited: %v%s", err, p.Tail())
		default:
		}
		resp, err := http.Get(readyz)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		p.Kill()
		return nil, fmt.Errorf("the manager did not become ready: %w%s", err, p.Tail())
	}
	return p, nil
}

// Kill kills the manager with SIGKILL, as an OOM kill or a lost node would: no deferred
// status patch runs and its leader lease is not released.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.done <- nil
}

// Stop stops the manager as the kubelet does (SIGTERM; SIGKILL after 30 s).
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		p.done <- nil
	case <-time.After(30 * time.Second):
		p.Kill()
	}
}

// RSS is the manager's resident set size in bytes, from /proc.
func (p *Process) RSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// Metrics scrapes the manager's /metrics and returns every unlabelled sample (the Go
// runtime's go_memstats_*, process_*) and the sum over labels of the labelled ones.
func (p *Process) Metrics() (map[string]float64, error) {
	resp, err := http.Get("http://" + p.MetricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				out[name] += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[name] += m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				out[name] += m.GetUntyped().GetValue()
			}
		}
	}
	return out, nil
}

// Tail is the end of the manager's log, for an error message.
func (p *Process) Tail() string {
	data, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return "\nthe manager's log ends with:\n" + string(data)
}

// writeKubeconfig writes the operator identity's credentials (the envtest user's client
// certificate) as the kubeconfig the manager reads, as a pod's token would be.
func writeKubeconfig(mgmt *testenv.Cluster, path string) error {
	c := mgmt.OperatorConfig
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["management"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData}
	cfg.AuthInfos["operator"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.CertData, ClientKeyData: c.KeyData}
	cfg.Contexts["operator"] = &clientcmdapi.Context{Cluster: "management", AuthInfo: "operator"}
	cfg.CurrentContext = "operator"
	return clientcmd.WriteToFile(*cfg, path)
}
