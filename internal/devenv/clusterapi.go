package devenv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/computeplane/internal/devenv/hostproc"
)

// ClusterAPIVersion is the Cluster API release whose managers the test bed runs; the
// operator's API types (go.mod) and the CRDs (UpstreamCRDs) are the same release.
const ClusterAPIVersion = "v1.14.2"

// ErrNoClusterAPI says Cluster API's managers are not built.
var ErrNoClusterAPI = errors.New("Cluster API's managers are not built: run test/tools/capi.sh (`make test` does), or set CLUSTER_API_BIN to its output")

// ClusterAPIBinaries is the directory holding capi-manager and
// capi-kubeadm-bootstrap-manager: $CLUSTER_API_BIN, or test/tools/capi.sh's cache
// (never building).
func ClusterAPIBinaries() (string, error) {
	return builtTool("CLUSTER_API_BIN", "capi.sh", ErrNoClusterAPI)
}

// builtTool is the directory of a test/tools script's output: $env, or what `script
// --path` prints (never building); notBuilt when neither names one.
func builtTool(env, script string, notBuilt error) (string, error) {
	if d := os.Getenv(env); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "test", "tools", script), "--path")
	cmd.Env = OutsideEnv()
	out, err := cmd.Output()
	if err != nil {
		return "", notBuilt
	}
	return strings.TrimSpace(string(out)), nil
}

// ClusterAPI is Cluster API's core manager and its kubeadm bootstrap provider's manager,
// the real ones, as host processes against a management cluster, with their admission
// webhooks registered as their release's manifests register them (by URL: no Service
// routes to a host process). The core manager's controllers make MachineSets and
// Machines of the operator's MachineDeployments, clone their bootstrap and
// infrastructure templates, remediate what MachineHealthChecks find, and link each
// Machine to its Node; the bootstrap provider renders each Machine's bootstrap data and
// creates its bootstrap token in the plane.
type ClusterAPI struct {
	Dir       string
	core      *hostproc.Process
	bootstrap *hostproc.Process
	mgmt      *Cluster
	webhooks  []client.Object
}

// ClusterAPIOptions shape StartClusterAPI.
type ClusterAPIOptions struct {
	// Binaries is ClusterAPIBinaries's directory.
	Binaries string
	// Dir holds the managers' logs, kubeconfig and certificates.
	Dir string
	// Proxy is how the managers reach the planes at the addresses of their
	// <cluster>-kubeconfig Secrets.
	Proxy *PlaneProxy
}

// capiManager is one of the two managers.
type capiManager struct {
	name     string // its binary, and the prefix its release gives its webhook configurations
	manifest string // its webhook manifests, in the module
}

var capiManagers = []capiManager{
	{"capi-manager", "core/config/webhook/manifests.yaml"},
	{"capi-kubeadm-bootstrap-manager", "bootstrap/kubeadm/config/webhook/manifests.yaml"},
}

// StartClusterAPI starts both managers against mgmt (started with
// ManagementOptions.ClusterAPI) and waits until each serves its webhooks.
func StartClusterAPI(ctx context.Context, mgmt *Cluster, o ClusterAPIOptions) (_ *ClusterAPI, err error) {
	capi := &ClusterAPI{Dir: o.Dir, mgmt: mgmt}
	defer func() {
		if err != nil {
			capi.Stop()
		}
	}()
	user, err := mgmt.Env.AddUser(envtest.User{Name: "cluster-api", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	ca, err := newRSACA("cluster-api-webhook-ca")
	if err != nil {
		return nil, err
	}
	cert, key, err := ca.issue("localhost", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return nil, err
	}
	certs := filepath.Join(o.Dir, "webhook-certs")
	if err := writeFiles(o.Dir, map[string][]byte{"kubeconfig": kubeconfig}); err != nil {
		return nil, err
	}
	if err := writeFiles(certs, map[string][]byte{"tls.crt": cert, "tls.key": key}); err != nil {
		return nil, err
	}
	moduleRoot, err := moduleDir("sigs.k8s.io/cluster-api", ClusterAPIVersion)
	if err != nil {
		return nil, err
	}
	env := append(hostproc.EnvWithout("KUBECONFIG", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"),
		"KUBECONFIG="+filepath.Join(o.Dir, "kubeconfig"))
	env = append(env, o.Proxy.Env()...)
	for _, m := range capiManagers {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		health, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		args := []string{"--leader-elect=false", "--diagnostics-address=0", "--health-addr=" + health,
			fmt.Sprintf("--webhook-port=%d", port), "--webhook-cert-dir=" + certs,
			// A test bed's pace: Machines and Nodes are checked every few seconds.
			"--sync-period=1m"}
		p, err := hostproc.Start(m.name, filepath.Join(o.Binaries, m.name), args, env, filepath.Join(o.Dir, m.name+".log"))
		if err != nil {
			return nil, err
		}
		if m.name == "capi-manager" {
			capi.core = p
		} else {
			capi.bootstrap = p
		}
		if err := waitServing(p, fmt.Sprintf("127.0.0.1:%d", port), 90*time.Second); err != nil {
			return nil, err
		}
		if err := capi.registerWebhooks(ctx, m, filepath.Join(moduleRoot, m.manifest), port, ca.certPEM); err != nil {
			return nil, err
		}
	}
	return capi, nil
}

// waitServing waits until the process accepts TLS connections at addr.
func waitServing(p *hostproc.Process, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.Exited() {
			return p.ExitError()
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not serve at %s in %s; log %s ends:\n%s", p.Name, addr, timeout, p.Log, p.Tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// registerWebhooks creates the manager's webhook configurations from its release's
// manifests, each webhook's Service reference replaced by the URL of its path on the
// host process.
func (c *ClusterAPI) registerWebhooks(ctx context.Context, m capiManager, manifest string, port int, caPEM []byte) error {
	raw, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var kind struct{ Kind string }
		if err := yaml.Unmarshal(doc, &kind); err != nil || kind.Kind == "" {
			continue
		}
		clientConfig := func(cc *admissionregistrationv1.WebhookClientConfig) {
			url := base + ptrOr(cc.Service.Path)
			*cc = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
		}
		var w client.Object
		var configs []*admissionregistrationv1.WebhookClientConfig
		switch kind.Kind {
		case "MutatingWebhookConfiguration":
			mw := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.Unmarshal(doc, mw); err != nil {
				return err
			}
			for i := range mw.Webhooks {
				configs = append(configs, &mw.Webhooks[i].ClientConfig)
			}
			w = mw
		case "ValidatingWebhookConfiguration":
			vw := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.Unmarshal(doc, vw); err != nil {
				return err
			}
			for i := range vw.Webhooks {
				configs = append(configs, &vw.Webhooks[i].ClientConfig)
			}
			w = vw
		default:
			continue
		}
		for _, cc := range configs {
			clientConfig(cc)
		}
		w.SetName(strings.TrimSuffix(m.name, "-manager") + "-" + w.GetName())
		if err := c.mgmt.Client.Create(ctx, w); err != nil {
			return fmt.Errorf("registering %s's webhooks: %w", m.name, err)
		}
		c.webhooks = append(c.webhooks, w)
	}
}

func ptrOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Alive is nil while both managers run.
func (c *ClusterAPI) Alive() error {
	for _, p := range []*hostproc.Process{c.core, c.bootstrap} {
		if p != nil && p.Exited() {
			return p.ExitError()
		}
	}
	return nil
}

// LogTail is the end of both managers' logs.
func (c *ClusterAPI) LogTail(lines int) string {
	var b strings.Builder
	for _, p := range []*hostproc.Process{c.core, c.bootstrap} {
		if p != nil {
			fmt.Fprintf(&b, "--- %s\n%s\n", p.Name, p.Tail(lines))
		}
	}
	return b.String()
}

// Stop removes the webhook configurations (a management cluster outliving the managers
// would refuse every Cluster API write) and stops both managers.
func (c *ClusterAPI) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, w := range c.webhooks {
		_ = c.mgmt.Client.Delete(ctx, w)
	}
	c.core.Stop(10 * time.Second)
	c.bootstrap.Stop(10 * time.Second)
}
