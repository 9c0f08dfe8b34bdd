package devenv

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cozystack/computeplane/internal/devenv/cilium"
)

// OperatorUser is the user name the operator has on the management cluster as
// config/default installs it (its ServiceAccount). The management-side admission
// policies in config/policies name it; tests run the operator under the same name.
const OperatorUser = "system:serviceaccount:" + OperatorNamespace + ":computeplane-controller-manager"

// OperatorNamespace is where config/default installs the operator.
const OperatorNamespace = "computeplane-system"

// Cluster is one running kube-apiserver (with its etcd).
type Cluster struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	// OperatorConfig authenticates as OperatorUser (management clusters only).
	OperatorConfig *rest.Config
	// AuditLog is where the apiserver logs the operator's requests (ManagementOptions.Audit).
	AuditLog string
	// etcdDir is etcd's data directory, owned here so etcd can be stopped and started
	// again with its data (envtest deletes a directory it created on every stop).
	etcdDir string
	// certDir holds the apiserver's keys, when not under etcdDir.
	certDir string
	// auditDir holds the management apiserver's audit policy and log.
	auditDir string
	// mu orders a test's etcd faults against a provider stopping the whole cluster from
	// its own goroutine (a plane torn down while its etcd is being restarted).
	mu      sync.Mutex
	stopped bool
	// latency sits in front of the apiserver (TenantOptions.Latency).
	latency *latencyProxy
}

// Stop stops the apiserver and etcd and removes their data.
func (c *Cluster) Stop() error {
	if c == nil || c.Env == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	if c.latency != nil {
		c.latency.close()
	}
	err := c.Env.Stop()
	for _, dir := range []string{c.etcdDir, c.certDir, c.auditDir} {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	return err
}

// ErrStopped is returned by etcd faults on a cluster already stopped as a whole.
var ErrStopped = errors.New("devenv: the cluster is stopped")

// StopEtcd stops the cluster's etcd while its apiserver keeps running, as when a
// datastore dies: the apiserver still answers /version, but nothing that needs storage.
func (c *Cluster) StopEtcd() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrStopped
	}
	return c.Env.ControlPlane.Etcd.Stop()
}

// StartEtcd starts the cluster's etcd again, on the same address, with its data.
func (c *Cluster) StartEtcd() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrStopped
	}
	return c.Env.ControlPlane.Etcd.Start()
}

// StopAPIServer stops the cluster's kube-apiserver (etcd keeps running), as when its
// pod dies; StartAPIServer brings it back.
func (c *Cluster) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrStopped
	}
	return c.Env.ControlPlane.APIServer.Stop()
}

// StartAPIServer starts the cluster's kube-apiserver again: same address, same serving
// and service-account keys (kept in a directory the Cluster owns), same users, same data.
func (c *Cluster) StartAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrStopped
	}
	return c.Env.ControlPlane.APIServer.Start()
}

// ManagementOptions shape the management cluster.
type ManagementOptions struct {
	// Scheme of the returned client; required.
	Scheme *runtime.Scheme
	// Webhooks installs config/webhook and points it at a local webhook server whose
	// host, port and certificates are in Env.WebhookInstallOptions.
	Webhooks bool
	// Bare starts the apiserver with the upstream CRDs only: the caller installs the
	// operator itself from its manifests (the demo applies the rendered chart).
	// OperatorConfig is then nil and Webhooks is ignored.
	Bare bool
	// Audit logs every request of the operator's identity (Cluster.AuditLog), so a
	// suite can compare what the operator asked for with the RBAC it ships.
	Audit bool
	// ClusterAPI loads the rest of Cluster API's CRDs (ClusterAPIManagerCRDs), which its
	// real managers need (StartClusterAPI).
	ClusterAPI bool
	// Cilium prepares the apiserver for a management node with a real cilium-agent
	// (internal/devenv/cilium): the rest of Cilium's CRDs (CiliumAgentCRDs), and the
	// apiserver listening on every address and advertising the host's end of the node's
	// link (cilium.HostIP), so the default/kubernetes Service's endpoints, which Cilium
	// labels as the kube-apiserver entity, are where a pod on that node really reaches it.
	Cilium bool
}

// StartManagement starts a management apiserver with the ComputePlane CRDs from
// config/crd and the pinned upstream CRDs.
func StartManagement(o ManagementOptions) (*Cluster, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	upstream, err := LoadUpstreamCRDs()
	if err != nil {
		return nil, err
	}
	if o.ClusterAPI {
		more, err := loadCRDSources(ClusterAPIManagerCRDs)
		if err != nil {
			return nil, err
		}
		upstream = append(upstream, more...)
	}
	if o.Cilium {
		more, err := loadCRDSources(CiliumAgentCRDs)
		if err != nil {
			return nil, err
		}
		upstream = append(upstream, more...)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: os.Getenv("KUBEBUILDER_ASSETS"),
		CRDs:                  upstream,
		Scheme:                o.Scheme,
	}
	certDir, err := os.MkdirTemp("", "computeplane-management-apiserver-")
	if err != nil {
		return nil, err
	}
	if err := restartable(env, certDir); err != nil {
		return nil, err
	}
	if o.Cilium {
		env.ControlPlane.GetAPIServer().Configure().Set("bind-address", "0.0.0.0").Set("advertise-address", cilium.HostIP)
	}
	if o.Bare {
		c, err := start(env, o.Scheme)
		if err != nil {
			return nil, err
		}
		c.certDir = certDir
		return c, nil
	}
	// As hardened distributions run it: setting blockOwnerDeletion (the operator's
	// controller references) needs the right to update the owner's finalizers.
	env.ControlPlane.GetAPIServer().Configure().Set("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	var auditLog, auditDir string
	if o.Audit {
		dir, err := os.MkdirTemp("", "computeplane-audit-")
		if err != nil {
			return nil, err
		}
		auditDir = dir
		flags, log, err := writeAuditPolicy(dir, auditPolicy)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		for k, v := range flags {
			env.ControlPlane.GetAPIServer().Configure().Set(k, v)
		}
		auditLog = log
	}
	env.CRDDirectoryPaths = []string{filepath.Join(root, "config", "crd", "bases")}
	env.ErrorIfCRDPathMissing = true
	if o.Webhooks {
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(root, "config", "webhook")},
		}
	}
	c, err := start(env, o.Scheme)
	if err != nil {
		if auditDir != "" {
			_ = os.RemoveAll(auditDir)
		}
		return nil, err
	}
	c.AuditLog, c.certDir, c.auditDir = auditLog, certDir, auditDir
	if err := installShipped(c.Client, root); err != nil {
		_ = c.Stop()
		return nil, err
	}
	// The groups a ServiceAccount's token carries, and no more: the operator has only the
	// RBAC config/default gives it.
	user, err := env.AddUser(envtest.User{Name: OperatorUser, Groups: []string{
		"system:serviceaccounts", "system:serviceaccounts:" + OperatorNamespace, "system:authenticated"}}, nil)
	if err != nil {
		_ = c.Stop()
		return nil, err
	}
	c.OperatorConfig = user.Config()
	c.OperatorConfig.QPS, c.OperatorConfig.Burst = c.Config.QPS, c.Config.Burst
	return c, nil
}

// StartTenant starts an independent apiserver standing in for a plane's Kamaji control
// plane: its own etcd, its own admission chain (Pod Security, ValidatingAdmissionPolicy).
func StartTenant(scheme *runtime.Scheme) (*Cluster, error) {
	return StartTenantWith(scheme, TenantOptions{})
}

// TenantOptions shape a tenant apiserver for fault tests.
type TenantOptions struct {
	// DisableAdmissionPlugins are turned off in the apiserver (as a misconfigured or
	// tampered control plane might have them).
	DisableAdmissionPlugins []string
	// Audit logs every request but the API server's own to Cluster.AuditLog (ReadAudit).
	Audit bool
	// SecurePort, when set, is the port to serve on (another cluster's old address).
	SecurePort int
	// Latency puts a TCP proxy in front of the apiserver, whose delay SetLatency
	// changes; Config.Host, and the admin kubeconfigs written for the cluster, name the
	// proxy (the apiserver's certificate covers its address: both are on loopback).
	Latency bool
}

// StartTenantWith starts a tenant apiserver with options.
func StartTenantWith(scheme *runtime.Scheme, o TenantOptions) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "computeplane-tenant-etcd-")
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: os.Getenv("KUBEBUILDER_ASSETS"), Scheme: scheme}
	env.ControlPlane.Etcd = &envtest.Etcd{DataDir: dir}
	if err := restartable(env, filepath.Join(dir, "apiserver")); err != nil {
		return nil, err
	}
	env.ControlPlane.GetAPIServer().SecurePort = o.SecurePort
	if len(o.DisableAdmissionPlugins) > 0 {
		env.ControlPlane.GetAPIServer().Configure().Set("disable-admission-plugins", strings.Join(o.DisableAdmissionPlugins, ","))
	}
	var auditLog string
	if o.Audit {
		// Beside etcd's own data, and removed with it.
		adir := filepath.Join(dir, "audit")
		if err := os.Mkdir(adir, 0o700); err != nil {
			return nil, err
		}
		flags, log, err := writeAuditPolicy(adir, tenantAuditPolicy)
		if err != nil {
			return nil, err
		}
		for k, v := range flags {
			env.ControlPlane.GetAPIServer().Configure().Set(k, v)
		}
		auditLog = log
	}
	c, err := start(env, scheme)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c.etcdDir, c.AuditLog = dir, auditLog
	if o.Latency {
		u, err := url.Parse(c.Config.Host)
		if err != nil {
			_ = c.Stop()
			return nil, err
		}
		if c.latency, err = startLatencyProxy(u.Host); err != nil {
			_ = c.Stop()
			return nil, err
		}
		u.Host = c.latency.addr()
		c.Config.Host = u.String()
	}
	return c, nil
}

// restartable keeps the apiserver's certificates and keys in dir, so a StopAPIServer and
// StartAPIServer serve with the same ones (envtest makes new ones in a fresh directory
// otherwise, and every client's CA would be wrong).
func restartable(env *envtest.Environment, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	env.ControlPlane.GetAPIServer().CertDir = dir
	return nil
}

func start(env *envtest.Environment, scheme *runtime.Scheme) (*Cluster, error) {
	if env.BinaryAssetsDirectory == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run through `make test`, or export KUBEBUILDER_ASSETS=$(test/tools/build.sh)")
	}
	env.ControlPlaneStartTimeout = 60 * time.Second
	env.ControlPlaneStopTimeout = 30 * time.Second
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", env.BinaryAssetsDirectory, err)
	}
	// Tests and benchmarks issue many requests; the client-side default (5 QPS) would
	// measure the rate limiter, not the operator.
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Cluster{Env: env, Config: cfg, Client: c}, nil
}

// RepoRoot finds the repository root by walking up to the go.mod of this module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			len(b) > 0 && containsModule(b, "module github.com/cozystack/computeplane\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the computeplane repository")
		}
		dir = parent
	}
}

func containsModule(gomod []byte, line string) bool {
	return len(gomod) >= len(line) && string(gomod[:len(line)]) == line
}

// CRDNames lists the names of CRDs, for assertions.
func CRDNames(crds []*apiextensionsv1.CustomResourceDefinition) []string {
	out := make([]string, 0, len(crds))
	for _, c := range crds {
		out = append(out, c.Name)
	}
	return out
}

// FreeAddr returns a loopback address with a port nothing listens on, for a server
// whose options take an address rather than a listener.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
