package devenv_test

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cozystack/computeplane/internal/devenv"
)

// chartLabels are what the chart adds to every object (release bookkeeping); nothing
// else may differ from config/default.
var chartLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/part-of"}

func objKey(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
}

func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		out[objKey(u)] = u
	}
	return out
}

// withoutChartBookkeeping returns a copy of a chart object without what the chart adds
// on purpose: its labels, the CRDs' keep policy and the values users set (image).
func withoutChartBookkeeping(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	labels := c.GetLabels()
	for _, l := range chartLabels {
		delete(labels, l)
	}
	c.SetLabels(labels)
	if len(labels) == 0 {
		unstructured.RemoveNestedField(c.Object, "metadata", "labels")
	}
	if c.GetKind() == "CustomResourceDefinition" {
		unstructured.RemoveNestedField(c.Object, "metadata", "annotations", "helm.sh/resource-policy")
		if len(c.GetAnnotations()) == 0 {
			unstructured.RemoveNestedField(c.Object, "metadata", "annotations")
		}
	}
	if c.GetKind() == "Deployment" {
		containers, _, _ := unstructured.NestedSlice(c.Object, "spec", "template", "spec", "containers")
		for _, ctr := range containers {
			delete(ctr.(map[string]any), "image")
			delete(ctr.(map[string]any), "imagePullPolicy")
		}
		_ = unstructured.SetNestedSlice(c.Object, containers, "spec", "template", "spec", "containers")
	}
	return c
}

func withoutImage(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	if c.GetKind() == "Deployment" {
		containers, _, _ := unstructured.NestedSlice(c.Object, "spec", "template", "spec", "containers")
		for _, ctr := range containers {
			delete(ctr.(map[string]any), "image")
		}
		_ = unstructured.SetNestedSlice(c.Object, containers, "spec", "template", "spec", "containers")
	}
	return c
}

// TestChartInstallsWhatKustomizeInstalls: `helm template` with the chart's defaults
// renders exactly config/default (the same CRDs, RBAC, admission policies, webhook
// configurations and the same hardened Deployment), but for the release bookkeeping
// and the Namespace object, which Helm leaves to --create-namespace. A rule added to one
// and not the other fails here.
func TestChartInstallsWhatKustomizeInstalls(t *testing.T) {
	root, err := devenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kustomized, err := devenv.Render(root)
	if err != nil {
		t.Fatal(err)
	}
	charted, err := devenv.RenderChart(root, devenv.OperatorNamespace)
	if err != nil {
		t.Fatal(err)
	}
	want, got := byKey(kustomized), byKey(charted)
	var missing, extra []string
	for k, w := range want {
		if w.GetKind() == "Namespace" {
			continue
		}
		g, ok := got[k]
		if !ok {
			missing = append(missing, k)
			continue
		}
		if a, b := withoutImage(w).Object, withoutChartBookkeeping(g).Object; !reflect.DeepEqual(a, b) {
			t.Errorf("%s differs between config/default and the chart:\nkustomize: %v\nchart:     %v", k, a, b)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("the chart does not install %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("the chart installs %v, which config/default does not", extra)
	}
}

// TestChartSelfSignedWebhookCertificate: without cert-manager the chart installs no
// cert-manager object, and the webhook configurations trust a CA that signed the
// certificate in the Secret the manager mounts, for the webhook Service's name in the
// release namespace.
func TestChartSelfSignedWebhookCertificate(t *testing.T) {
	root, err := devenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const ns = "platform-ops"
	objs, err := devenv.RenderChart(root, ns, "certManager.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	var secret *unstructured.Unstructured
	var mounted string
	var bundles []string
	for _, u := range objs {
		switch u.GetKind() {
		case "Certificate", "Issuer":
			t.Errorf("%s installed with certManager.enabled=false", objKey(u))
		case "Secret":
			secret = u
		case "Deployment":
			vols, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "volumes")
			for _, v := range vols {
				if name, ok, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); ok {
					mounted = name
				}
			}
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			if _, ok := u.GetAnnotations()["cert-manager.io/inject-ca-from"]; ok {
				t.Errorf("%s still asks cert-manager for its CA", objKey(u))
			}
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			for _, h := range hooks {
				b, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "caBundle")
				if svcNS, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "namespace"); svcNS != ns {
					t.Errorf("%s calls a Service in %q, not the release namespace", objKey(u), svcNS)
				}
				bundles = append(bundles, b)
			}
		}
	}
	if secret == nil {
		t.Fatal("the chart renders no serving Secret")
	}
	if secret.GetName() != mounted {
		t.Fatalf("the manager mounts Secret %q; the chart renders %q", mounted, secret.GetName())
	}
	data := func(key string) []byte {
		v, _, _ := unstructured.NestedString(secret.Object, "data", key)
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return b
	}
	ca := data("ca.crt")
	if len(bundles) == 0 {
		t.Fatal("no webhook in the chart")
	}
	for _, b := range bundles {
		if b != base64.StdEncoding.EncodeToString(ca) {
			t.Error("a webhook trusts a CA other than the one in the serving Secret")
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("ca.crt holds no certificate")
	}
	block, _ := pem.Decode(data("tls.crt"))
	if block == nil {
		t.Fatal("tls.crt holds no certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"computeplane-webhook-service." + ns + ".svc", "computeplane-webhook-service." + ns + ".svc.cluster.local"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the serving certificate is not valid for %s: %v", name, err)
		}
	}
	if !strings.HasPrefix(string(data("tls.key")), "-----BEGIN") {
		t.Error("tls.key is not a PEM key")
	}
}

// TestChartShards: with sharding.shards the chart runs one more Deployment per shard,
// each selecting only its planes and its own pods (a Deployment selecting another's pods
// would fight it over them), while the main one keeps the planes without a shard key
// and alone serves admission.
func TestChartShards(t *testing.T) {
	root, err := devenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := devenv.RenderChart(root, devenv.OperatorNamespace, "sharding.shards={shard1,shard2}")
	if err != nil {
		t.Fatal(err)
	}
	selectors := map[string]map[string]any{}
	args := map[string][]any{}
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		sel, _, _ := unstructured.NestedMap(u.Object, "spec", "selector", "matchLabels")
		selectors[u.GetName()] = sel
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		args[u.GetName()] = containers[0].(map[string]any)["args"].([]any)
	}
	want := map[string][]string{
		"computeplane-controller-manager":        {"--watch-label-selector=!sharding.fluxcd.io/key"},
		"computeplane-controller-manager-shard1": {"--watch-label-selector=sharding.fluxcd.io/key in (shard1)", "--enable-webhooks=false"},
		"computeplane-controller-manager-shard2": {"--watch-label-selector=sharding.fluxcd.io/key in (shard2)", "--enable-webhooks=false"},
	}
	if len(args) != len(want) {
		t.Fatalf("Deployments %v, want %d", args, len(want))
	}
	for name, flags := range want {
		have := fmt.Sprint(args[name])
		for _, f := range flags {
			if !strings.Contains(have, f) {
				t.Errorf("%s args %s lack %s", name, have, f)
			}
		}
	}
	for a, sa := range selectors {
		for b, sb := range selectors {
			if a == b {
				continue
			}
			overlap := true // does b's pod template (== its selector) match a's selector?
			for k, v := range sa {
				if sb[k] != v {
					overlap = false
				}
			}
			if overlap {
				t.Errorf("Deployment %s selects the pods of %s", a, b)
			}
		}
	}
}

// TestChartShardKeyGuarded: the shard guard holds the label the chart's shards are
// selected by. With the key hardcoded, a chart configured with another key left that
// label free: a tenant could move its plane to a shard no manager runs.
func TestChartShardKeyGuarded(t *testing.T) {
	root, err := devenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const key = "shards.example.com/operator"
	objs, err := devenv.RenderChart(root, devenv.OperatorNamespace, "sharding.key="+key, "sharding.shards={shard1}")
	if err != nil {
		t.Fatal(err)
	}
	var guard *unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == "ValidatingAdmissionPolicy" && strings.HasSuffix(u.GetName(), "shard-guard") {
			guard = u
		}
	}
	if guard == nil {
		t.Fatal("the chart renders no shard guard")
	}
	spec := fmt.Sprint(guard.Object["spec"])
	if !strings.Contains(spec, "'"+key+"'") || strings.Contains(spec, "sharding.fluxcd.io/key") {
		t.Errorf("the shard guard does not hold the configured key %s: %s", key, spec)
	}
	for _, u := range objs {
		if u.GetKind() == "Deployment" && strings.Contains(fmt.Sprint(u.Object["spec"]), "sharding.fluxcd.io/key") {
			t.Errorf("Deployment %s still selects by the default key", u.GetName())
		}
	}
}

// TestChartCapabilityLabelGuarded: the namespace guard lets the operator change only the
// beacon the chart configures it to set, and the manager is told which.
func TestChartCapabilityLabelGuarded(t *testing.T) {
	root, err := devenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const key = "namespace.cozystack.io/capability.gpu-plane"
	objs, err := devenv.RenderChart(root, devenv.OperatorNamespace, "capabilityLabel="+key)
	if err != nil {
		t.Fatal(err)
	}
	var guard, manager string
	for _, u := range objs {
		switch {
		case u.GetKind() == "ValidatingAdmissionPolicy" && strings.HasSuffix(u.GetName(), "namespace-guard"):
			guard = fmt.Sprint(u.Object["spec"])
		case u.GetKind() == "Deployment":
			manager = fmt.Sprint(u.Object["spec"])
		}
	}
	if !strings.Contains(guard, "'"+key+"'") || strings.Contains(guard, "capability.computeplane") {
		t.Errorf("the namespace guard does not hold the configured beacon %s: %s", key, guard)
	}
	if !strings.Contains(manager, "--capability-label="+key) {
		t.Errorf("the manager is not told its beacon: %s", manager)
	}
	if _, err := devenv.RenderChart(root, devenv.OperatorNamespace, "capabilityLabel=example.com/computeplane"); err == nil {
		t.Error("a beacon outside namespace.cozystack.io/capability. rendered")
	}
}
