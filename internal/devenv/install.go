package devenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// notInstalled are the kinds of config/default a test apiserver does without: the
// manager runs in the test process (no Deployment, no Service in front of it), envtest
// installs the webhook configurations pointed at it, with its own certificates (no
// cert-manager), and the CRDs are installed before this.
var notInstalled = map[string]bool{
	"Deployment": true, "Service": true, "Certificate": true, "Issuer": true,
	"ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true,
	"CustomResourceDefinition": true,
}

// Render returns the objects of config/default as `kubectl kustomize` renders them for
// users (kubectl is the one test/tools builds, in KUBEBUILDER_ASSETS).
func Render(root string) ([]*unstructured.Unstructured, error) {
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	return renderWith("kubectl kustomize config/default", exec.Command(kubectl, "kustomize", filepath.Join(root, "config", "default")))
}

// ChartDir is where the Helm chart lives in the repository.
func ChartDir(root string) string { return filepath.Join(root, "config", "helm", "computeplane") }

// RenderChart returns the objects `helm template` renders from the chart into namespace,
// with values set (--set key=value).
func RenderChart(root, namespace string, set ...string) ([]*unstructured.Unstructured, error) {
	helm, err := Helm(root)
	if err != nil {
		return nil, err
	}
	args := []string{"template", "computeplane", ChartDir(root), "--namespace", namespace}
	for _, kv := range set {
		args = append(args, "--set", kv)
	}
	return renderWith("helm template", exec.Command(helm, args...))
}

// Helm returns the pinned Helm CLI: $HELM (as the Makefile sets it), or the one
// test/tools/helm.sh builds (once) and caches.
func Helm(root string) (string, error) {
	if h := os.Getenv("HELM"); h != "" {
		return h, nil
	}
	// It may build Helm, fetching modules: not through the plane proxy.
	cmd := exec.Command(filepath.Join(root, "test", "tools", "helm.sh"))
	cmd.Env = OutsideEnv()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("test/tools/helm.sh: %w", err)
	}
	return string(bytes.TrimSpace(out)), nil
}

func renderWith(what string, cmd *exec.Cmd) ([]*unstructured.Unstructured, error) {
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("%s: %w: %s", what, err, exit.Stderr)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return ParseObjects(out)
}

// ParseObjects splits a multi-document YAML stream into objects (empty documents
// skipped).
func ParseObjects(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		objs = append(objs, u)
	}
}

// installShipped creates what config/default installs on a management cluster (the
// namespace, the operator's ServiceAccount and its RBAC, the tenant and platform roles,
// the admission policies) as users get it: the operator in every test runs with exactly
// the RBAC it ships, and the policies tests prove are the ones it ships.
func installShipped(c client.Client, root string) error {
	objs, err := Render(root)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, u := range objs {
		if notInstalled[u.GetKind()] {
			continue
		}
		if err := c.Create(ctx, u); err != nil {
			return fmt.Errorf("config/default: creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}
