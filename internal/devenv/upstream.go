// Package devenv starts real kube-apiservers for tests, benchmarks and the demo: a
// management cluster with the ComputePlane CRDs and the real upstream CRDs (Cluster API,
// Kamaji, its CAPI provider, CAPK, Cilium, Flux) read from the pinned upstream modules,
// and independent tenant clusters standing in for Kamaji control planes.
package devenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// UpstreamCRDSource is one pinned upstream module and the CRD files it ships.
type UpstreamCRDSource struct {
	Module  string
	Version string
	// Files are paths inside the module; globs allowed.
	Files []string
	// Labels are what the module's own kustomization (commonLabels) puts on its CRDs,
	// as clusterctl installs them: Cluster API's contract labels, from which its
	// controllers read the version of a kind a reference names
	// (sigs.k8s.io/cluster-api v1.14.2 internal/contract/version.go).
	Labels map[string]string
}

// capiContract are Cluster API's own contract labels (core/config/crd and
// bootstrap/kubeadm/config/crd kustomization.yaml).
var capiContract = map[string]string{"cluster.x-k8s.io/v1beta1": "v1beta1", "cluster.x-k8s.io/v1beta2": "v1beta2"}

// UpstreamCRDs pins every upstream API the operator works with. The versions match
// go.mod where the Go types are a dependency; the others (the CAPI main module, Kamaji's
// CAPI provider, CAPK, the Flux controllers) are read only for their CRD YAML.
var UpstreamCRDs = []UpstreamCRDSource{
	{Module: "sigs.k8s.io/cluster-api", Version: "v1.14.2", Files: []string{
		"core/config/crd/bases/cluster.x-k8s.io_clusters.yaml",
		"core/config/crd/bases/cluster.x-k8s.io_machinedeployments.yaml",
		"core/config/crd/bases/cluster.x-k8s.io_machinesets.yaml",
		"core/config/crd/bases/cluster.x-k8s.io_machines.yaml",
		"core/config/crd/bases/cluster.x-k8s.io_machinehealthchecks.yaml",
		"bootstrap/kubeadm/config/crd/bases/bootstrap.cluster.x-k8s.io_kubeadmconfigtemplates.yaml",
	}, Labels: capiContract},
	{Module: "github.com/clastix/kamaji", Version: "v1.0.0", Files: []string{
		"charts/kamaji/crds/tenantcontrolplane.yaml",
		"charts/kamaji/crds/datastore.yaml",
	}},
	{Module: "github.com/clastix/cluster-api-control-plane-provider-kamaji", Version: "v0.20.0", Files: []string{
		"config/crd/bases/controlplane.cluster.x-k8s.io_kamajicontrolplanes.yaml",
	}, Labels: map[string]string{"cluster.x-k8s.io/v1beta2": "v1alpha2"}},
	{Module: "sigs.k8s.io/cluster-api-provider-kubevirt", Version: "v0.1.10", Files: []string{
		"config/crd/bases/infrastructure.cluster.x-k8s.io_kubevirtclusters.yaml",
		"config/crd/bases/infrastructure.cluster.x-k8s.io_kubevirtmachines.yaml",
		"config/crd/bases/infrastructure.cluster.x-k8s.io_kubevirtmachinetemplates.yaml",
	}, Labels: map[string]string{"cluster.x-k8s.io/provider": "kubevirt", "cluster.x-k8s.io/v1beta1": "v1alpha1"}},
	{Module: "github.com/cilium/cilium", Version: "v1.18.4", Files: []string{
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnetworkpolicies.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumclusterwidenetworkpolicies.yaml",
	}},
	// The Flux controllers at the release the e2e suite runs (test/tools/flux.sh); the
	// Go types are the api module of go.mod (v1.4.0), which these CRDs accept.
	{Module: "github.com/fluxcd/helm-controller", Version: "v1.6.2", Files: []string{
		"config/crd/bases/helm.toolkit.fluxcd.io_helmreleases.yaml",
	}},
	// Kustomizations name kubeconfig and substitution Secrets too: admission judges them.
	{Module: "github.com/fluxcd/kustomize-controller", Version: "v1.6.0", Files: []string{
		"config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml",
	}},
	{Module: "github.com/fluxcd/source-controller", Version: "v1.9.0", Files: []string{
		"config/crd/bases/source.toolkit.fluxcd.io_helmrepositories.yaml",
		"config/crd/bases/source.toolkit.fluxcd.io_helmcharts.yaml",
		"config/crd/bases/source.toolkit.fluxcd.io_ocirepositories.yaml",
		"config/crd/bases/source.toolkit.fluxcd.io_externalartifacts.yaml",
	}},
}

// ClusterAPIManagerCRDs are the rest of Cluster API's CRDs, which its real managers
// (StartClusterAPI) watch or migrate at start: MachinePools (a beta gate on by default),
// ClusterClasses, ClusterResourceSets, IPAM, runtime extensions, MachineDrainRules,
// KubeadmConfigs. Only a management cluster that runs them loads these.
var ClusterAPIManagerCRDs = []UpstreamCRDSource{
	{Module: "sigs.k8s.io/cluster-api", Version: "v1.14.2", Files: []string{
		"core/config/crd/bases/addons.cluster.x-k8s.io_*.yaml",
		"core/config/crd/bases/cluster.x-k8s.io_clusterclasses.yaml",
		"core/config/crd/bases/cluster.x-k8s.io_machinedrainrules.yaml",
		"core/config/crd/bases/cluster.x-k8s.io_machinepools.yaml",
		"core/config/crd/bases/ipam.cluster.x-k8s.io_*.yaml",
		"core/config/crd/bases/runtime.cluster.x-k8s.io_*.yaml",
		"bootstrap/kubeadm/config/crd/bases/bootstrap.cluster.x-k8s.io_kubeadmconfigs.yaml",
	}, Labels: capiContract},
}

// CiliumAgentCRDs are the rest of Cilium's CRDs, which its agent waits for at start
// (pkg/k8s/synced/crd.go agentCRDResourceNames; Cilium's operator would register them).
// Only a management cluster that runs the agent (ManagementOptions.Cilium) loads these.
var CiliumAgentCRDs = []UpstreamCRDSource{
	{Module: "github.com/cilium/cilium", Version: "v1.18.4", Files: []string{
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumbgp*.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumcidrgroups.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumclusterwideenvoyconfigs.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumegressgatewaypolicies.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumendpoints.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumenvoyconfigs.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumidentities.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumloadbalancerippools.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumlocalredirectpolicies.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnodeconfigs.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnodes.yaml",
		"pkg/k8s/apis/cilium.io/client/crds/v2alpha1/*.yaml",
	}},
}

var (
	upstreamOnce sync.Once
	upstream     []*apiextensionsv1.CustomResourceDefinition
	upstreamErr  error
)

// LoadUpstreamCRDs reads the pinned upstream CRDs from the module cache (downloading a
// module through the Go module proxy the first time). Conversion webhooks are dropped:
// a test apiserver has no webhook to call, so multi-version CRDs are served without
// conversion and must be used at their storage version.
func LoadUpstreamCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	upstreamOnce.Do(func() { upstream, upstreamErr = loadCRDSources(UpstreamCRDs) })
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(upstream))
	for _, c := range upstream {
		out = append(out, c.DeepCopy())
	}
	return out, upstreamErr
}

func loadCRDSources(sources []UpstreamCRDSource) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, src := range sources {
		dir, err := moduleDir(src.Module, src.Version)
		if err != nil {
			return nil, err
		}
		for _, pattern := range src.Files {
			files, err := filepath.Glob(filepath.Join(dir, pattern))
			if err != nil || len(files) == 0 {
				return nil, fmt.Errorf("%s@%s has no %s", src.Module, src.Version, pattern)
			}
			for _, f := range files {
				crds, err := readCRDs(f)
				if err != nil {
					return nil, err
				}
				for _, c := range crds {
					for k, v := range src.Labels {
						if c.Labels == nil {
							c.Labels = map[string]string{}
						}
						c.Labels[k] = v
					}
				}
				out = append(out, crds...)
			}
		}
	}
	return out, nil
}

// moduleDir returns the module's directory in the module cache. It runs outside any
// module so that go.mod and go.sum of the project are never touched, and not through the
// plane proxy (OutsideEnv). The module proxy sometimes answers 502 Bad Gateway on a first
// fetch and the next try works: a failed download is tried again, five times in all.
func moduleDir(module, version string) (dir string, err error) {
	for try := 1; ; try++ {
		if dir, err = downloadModule(module, version); err == nil || try == 5 {
			return dir, err
		}
		time.Sleep(2 * time.Second)
	}
}

func downloadModule(module, version string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = os.TempDir()
	cmd.Env = append(OutsideEnv(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr == nil && info.Error != "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", module, version, info.Error)
	}
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w: %s", module, version, err, stderr.String())
	}
	if info.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s returned no directory", module, version)
	}
	return info.Dir, nil
}

func readCRDs(path string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*apiextensionsv1.CustomResourceDefinition
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(doc, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			continue
		}
		crd.Spec.Conversion = nil
		out = append(out, crd)
	}
}
