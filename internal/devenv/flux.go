package devenv

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// chartArchive packs a chart the way `helm package` does: a gzipped tar with the chart
// in a directory of its name.
func chartArchive(name string, files Chart) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	all := map[string]string{"Chart.yaml": fmt.Sprintf("apiVersion: v2\nname: %s\nversion: 0.1.0\n", name)}
	for k, v := range files {
		all[k] = v
	}
	for path, content := range all {
		if err := tw.WriteHeader(&tar.Header{Name: name + "/" + path, Mode: 0o644, Size: int64(len(content)), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Chart is a Helm chart's files (templates, values) by path; Chart.yaml is added.
type Chart map[string]string

// ServeCharts serves each chart on loopback and publishes it as an ExternalArtifact of its
// name in namespace (created here), with the status source-controller would write, for the
// real Flux helm-controller to install from. The returned func stops the server.
func ServeCharts(ctx context.Context, c client.Client, namespace string, charts map[string]Chart) (func(), error) {
	archives := map[string][]byte{}
	for name, files := range charts {
		a, err := chartArchive(name, files)
		if err != nil {
			return nil, err
		}
		archives["/"+name+".tgz"] = a
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := archives[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(a)
	}))
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		srv.Close()
		return nil, err
	}
	for name := range charts {
		a := archives["/"+name+".tgz"]
		sum := sha256.Sum256(a)
		ea := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		if err := c.Create(ctx, ea); err != nil {
			srv.Close()
			return nil, err
		}
		size := int64(len(a))
		ea.Status.Artifact = &meta.Artifact{
			Path: name + ".tgz", URL: srv.URL + "/" + name + ".tgz", Revision: "0.1.0@sha256:" + hex.EncodeToString(sum[:]),
			Digest: "sha256:" + hex.EncodeToString(sum[:]), LastUpdateTime: metav1.Now(), Size: &size,
		}
		apimeta.SetStatusCondition(&ea.Status.Conditions, metav1.Condition{Type: meta.ReadyCondition, Status: metav1.ConditionTrue,
			Reason: meta.SucceededReason, Message: "served by the e2e suite"})
		if err := c.Status().Update(ctx, ea); err != nil {
			srv.Close()
			return nil, err
		}
	}
	return srv.Close, nil
}

// HelmController runs the real Flux helm-controller (test/tools/flux.sh) against the
// management apiserver, as a cluster administrator, watching every namespace. It inherits
// this process's environment (HTTPS_PROXY, say, to reach planes at their in-cluster names).
type HelmController struct {
	cmd  *exec.Cmd
	log  *fluxLog
	done chan struct{}
}

// FluxHelmControllerBinary finds the helm-controller: $FLUX_HELM_CONTROLLER, else the
// cache test/tools/flux.sh builds into (asked with --path, which never builds); "" when
// it is not built.
func FluxHelmControllerBinary() string {
	if bin := os.Getenv("FLUX_HELM_CONTROLLER"); bin != "" {
		return bin
	}
	root, err := RepoRoot()
	if err != nil {
		return ""
	}
	out, err := exec.Command(filepath.Join(root, "test", "tools", "flux.sh"), "--path").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// StartHelmController starts the helm-controller binary against mgmt.
func StartHelmController(mgmt *Cluster, binary string) (*HelmController, error) {
	user, err := mgmt.Env.AddUser(envtest.User{Name: "flux-helm-controller", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "computeplane-e2e-flux-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	metrics, health, err := fluxFreePort(), fluxFreePort(), nil
	if metrics == 0 || health == 0 {
		return nil, fmt.Errorf("no free port for the helm-controller")
	}
	cmd := exec.Command(binary,
		"--watch-all-namespaces", "--enable-leader-election=false", "--concurrent=8",
		"--metrics-addr=127.0.0.1:"+strconv.Itoa(metrics), "--health-addr=127.0.0.1:"+strconv.Itoa(health),
		"--feature-gates=ExternalArtifact=true", "--requeue-dependency=1s")
	cmd.Env = append(withoutEnv(os.Environ(), "SOURCE_CONTROLLER_LOCALHOST"), "KUBECONFIG="+path)
	log := &fluxLog{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &HelmController{cmd: cmd, log: log, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(h.done); _ = os.RemoveAll(dir) }()
	return h, err
}

// Log is what the controller printed so far.
func (h *HelmController) Log() string { return h.log.String() }

// Stop kills the controller and waits for it.
func (h *HelmController) Stop() {
	_ = h.cmd.Process.Kill()
	<-h.done
}

func fluxFreePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func withoutEnv(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		if len(e) > len(name) && e[:len(name)+1] == name+"=" {
			continue
		}
		out = append(out, e)
	}
	return out
}

// fluxLog collects a subprocess's output for a failing test to print.
type fluxLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *fluxLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *fluxLog) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
