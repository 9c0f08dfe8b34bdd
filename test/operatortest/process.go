package operatortest

import (
	"context"
	"crypto/sha256"
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
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cozystack/computeplane/internal/devenv"
)

// Process is the shipped manager binary (cmd/manager) running as its own process against
// a devenv management cluster, as the operator's ServiceAccount: what the Deployment
// runs. A fault test can SIGKILL it mid-stage, and a benchmark can read its memory
// without the test's own allocations mixed in.
type Process struct {
	// MetricsAddr serves /metrics over plain HTTP (--metrics-secure=false).
	MetricsAddr string
	// Log is the file the manager's output goes to (every run's, appended).
	Log string

	args, env []string
	// dir holds the kubeconfig and the log; Stop removes it.
	dir      string
	cgroup   *memoryCgroup
	probe    string
	restart  bool
	mu       sync.Mutex
	cmd      *exec.Cmd
	stopping bool
	runs     int
	exited   chan struct{}
}

// ProcessOptions shape a manager process.
type ProcessOptions struct {
	// Args are more flags (`--requeue-interval=2s`, say), after the ones Process sets.
	Args []string
	// Webhooks serves the admission webhooks where the management Cluster's webhook
	// configurations point (ManagementOptions.Webhooks).
	Webhooks bool
	// Restart starts the manager again whenever it exits (killed, or leadership lost),
	// as the kubelet restarts a crashed container; Stop ends that.
	Restart bool
	// Env adds to the manager's environment (GOMEMLIMIT=..., say), after the test's own.
	Env []string
	// MemoryLimit, when set, runs the manager in a memory cgroup of its own limited to
	// that many bytes, as a container's memory limit would (MemoryCgroup reads it).
	MemoryLimit int64
}

var build struct {
	once sync.Once
	bin  string
	err  error
}

// ManagerBinary builds cmd/manager once per test binary and returns its path: one
// file per checkout in the user's cache directory, replaced by each build (a rename, so
// a manager another test binary is running keeps its own copy), never one more per run.
// Named after the checkout, so that tests of another worktree never run (or restart) a
// manager built from other code.
func ManagerBinary() (string, error) {
	build.once.Do(func() {
		root, err := devenv.RepoRoot()
		if err != nil {
			build.err = err
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			build.err = err
			return
		}
		dir := filepath.Join(cache, "computeplane", "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			build.err = err
			return
		}
		tmp := filepath.Join(dir, fmt.Sprintf(".manager-%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-o", tmp, "./cmd/manager")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.Remove(tmp)
			build.err = fmt.Errorf("building cmd/manager: %v\n%s", err, out)
			return
		}
		build.bin = filepath.Join(dir, fmt.Sprintf("manager-%x", sha256.Sum256([]byte(root)))[:len("manager-")+12])
		build.err = os.Rename(tmp, build.bin)
	})
	return build.bin, build.err
}

// StartProcess starts the manager binary with leader election (in the operator's
// namespace, as deployed) and returns once it is ready (its caches synced and, with
// webhooks, its webhook server serving). Leading is another matter: a successor of a
// killed manager waits for the lease to expire (WaitLeading).
func StartProcess(ctx context.Context, mgmt *devenv.Cluster, o ProcessOptions) (*Process, error) {
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
	started := false
	defer func() {
		if !started {
			_ = os.RemoveAll(dir)
		}
	}()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(mgmt, kubeconfig); err != nil {
		return nil, err
	}
	metricsAddr, err := devenv.FreeAddr()
	if err != nil {
		return nil, err
	}
	probeAddr, err := devenv.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address=" + probeAddr,
		"--leader-elect=true", "--leader-election-namespace=" + devenv.OperatorNamespace,
	}
	if o.Webhooks {
		w := mgmt.Env.WebhookInstallOptions
		args = append(args, "--enable-webhooks=true", "--webhook-port="+strconv.Itoa(w.LocalServingPort),
			"--webhook-cert-dir="+w.LocalServingCertDir)
	} else {
		args = append(args, "--enable-webhooks=false")
	}
	p := &Process{
		MetricsAddr: metricsAddr, Log: filepath.Join(dir, "manager.log"), probe: probeAddr, dir: dir,
		args: append(append([]string{bin}, args...), o.Args...), env: append(append(os.Environ(), "KUBECONFIG="+kubeconfig), o.Env...),
		restart: o.Restart, exited: make(chan struct{}),
	}
	if o.MemoryLimit > 0 {
		if p.cgroup, err = newMemoryCgroup(o.MemoryLimit); err != nil {
			return nil, fmt.Errorf("a memory limit for the manager: %w", err)
		}
		if err := evict(bin); err != nil {
			return nil, err
		}
		p.args = p.cgroup.command(p.args)
	}
	log, err := os.Create(p.Log)
	if err != nil {
		return nil, err
	}
	if err := p.run(log); err != nil {
		_ = log.Close()
		return nil, err
	}
	started = true
	if err := p.WaitReady(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// run starts the binary, and keeps starting it again while Restart says so.
func (p *Process) run(log *os.File) error {
	start := func() (*exec.Cmd, error) {
		cmd := exec.Command(p.args[0], p.args[1:]...)
		cmd.Env, cmd.Stdout, cmd.Stderr = p.env, log, log
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		p.mu.Lock()
		p.cmd = cmd
		p.runs++
		p.mu.Unlock()
		return cmd, nil
	}
	cmd, err := start()
	if err != nil {
		return err
	}
	go func() {
		defer close(p.exited)
		defer log.Close()
		if p.cgroup != nil {
			defer func() { _ = p.cgroup.remove() }()
		}
		for {
			_ = cmd.Wait()
			p.mu.Lock()
			again := p.restart && !p.stopping
			p.mu.Unlock()
			if !again {
				return
			}
			time.Sleep(200 * time.Millisecond)
			if cmd, err = start(); err != nil {
				fmt.Fprintf(log, "restarting the manager: %v\n", err)
				return
			}
		}
	}()
	return nil
}

// WaitReady waits until the manager (the current run) serves readiness.
func (p *Process) WaitReady(ctx context.Context) error {
	err := devenv.WaitReadyz(ctx, p.probe, 50*time.Millisecond, 90*time.Second, func() error {
		select {
		case <-p.exited:
			return fmt.Errorf("the manager exited%s", p.Tail())
		default:
			return nil
		}
	})
	if err != nil {
		return fmt.Errorf("the manager did not become ready: %w%s", err, p.Tail())
	}
	return nil
}

// Runs is how many times the binary was started.
func (p *Process) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// Kill kills the manager's current run with SIGKILL, as an OOM kill or a lost node would:
// no deferred status patch runs and its leader lease is not released. With Restart, a
// new run starts; otherwise Kill returns once the process is gone.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	if !p.restart {
		<-p.exited
	}
}

// Stop stops the manager as the kubelet does when a pod is deleted (SIGTERM; SIGKILL
// after 30 s), does not start it again, and removes its kubeconfig and log (Tail
// reads nothing after).
func (p *Process) Stop() {
	p.mu.Lock()
	p.stopping = true
	cmd := p.cmd
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
	_ = os.RemoveAll(p.dir)
}

// RSS is the manager's resident set size in bytes, from /proc.
func (p *Process) RSS() (int64, error) {
	return p.status("VmRSS")
}

// RSSAnon is the process's anonymous resident memory (heap, stacks: RSS less the
// binary's and other files' pages, which the kernel can drop and read again).
func (p *Process) RSSAnon() (int64, error) {
	return p.status("RssAnon")
}

// status reads one size field (kB) of /proc/PID/status.
func (p *Process) status(field string) (int64, error) {
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == field+":" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc status", field)
}

// MemoryCgroup reads the counters of the manager's memory cgroup (ProcessOptions.MemoryLimit).
func (p *Process) MemoryCgroup() (MemoryCgroupStats, error) {
	if p.cgroup == nil {
		return MemoryCgroupStats{}, errors.New("the manager runs without a memory limit")
	}
	return p.cgroup.stats()
}

// Metrics scrapes the manager's /metrics and returns every unlabelled sample (the Go
// runtime's go_memstats_*, process_*), the sum over labels of the labelled ones under
// their name, and each labelled sample under name{label="value",...}.
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
			var v float64
			switch {
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				v = m.GetUntyped().GetValue()
			case m.GetSummary() != nil:
				// A summary counts as its observations, under name_count.
				out[name+"_count"] += float64(m.GetSummary().GetSampleCount())
				continue
			}
			out[name] += v
			if len(m.GetLabel()) > 0 {
				var ls []string
				for _, l := range m.GetLabel() {
					ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				out[name+"{"+strings.Join(ls, ",")+"}"] = v
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
func writeKubeconfig(mgmt *devenv.Cluster, path string) error {
	c := mgmt.OperatorConfig
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["management"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData}
	cfg.AuthInfos["operator"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.CertData, ClientKeyData: c.KeyData}
	cfg.Contexts["operator"] = &clientcmdapi.Context{Cluster: "management", AuthInfo: "operator"}
	cfg.CurrentContext = "operator"
	return clientcmd.WriteToFile(*cfg, path)
}
