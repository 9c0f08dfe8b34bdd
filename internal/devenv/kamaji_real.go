package devenv

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cozystack/computeplane/internal/devenv/hostproc"
)

// KamajiVersion is the Kamaji release test/tools/kamaji.sh builds (the only one the Go
// module proxy serves) and whose CRDs UpstreamCRDs loads.
const KamajiVersion = "v1.0.0"

// KamajiWebhookPort is where Kamaji v1.0.0's webhook server listens, on every interface:
// cmd/manager/cmd.go hard-codes ctrlwebhook.Options{Port: 9443} and offers no flag to move
// or disable it, so only one real Kamaji can run on a host at a time (StartRealKamaji
// holds a host-wide lock for as long as it runs).
const KamajiWebhookPort = 9443

// KamajiDataStoreName is the DataStore StartRealKamaji creates and passes to Kamaji as
// --datastore (the default for TenantControlPlanes with no spec.dataStore).
const KamajiDataStoreName = "computeplane-etcd"

// KamajiNamespace is the --pod-namespace Kamaji is given (its leader election and
// datastore-migration Jobs would live there; neither runs here).
const KamajiNamespace = "kamaji-system"

// ErrNoKamaji is returned by KamajiBinary when the manager has not been built.
var ErrNoKamaji = errors.New("the Kamaji " + KamajiVersion + " manager is not built: run test/tools/kamaji.sh " +
	"(about 8 minutes the first time on two cores), or set KAMAJI_BIN to its output")

// KamajiBinary finds the Kamaji manager: $KAMAJI_BIN, else the cache test/tools/kamaji.sh
// builds into (asked with --path, which never builds).
func KamajiBinary() (string, error) {
	if bin := os.Getenv("KAMAJI_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("KAMAJI_BIN=%s: %w", bin, err)
		}
		return bin, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(root, "test", "tools", "kamaji.sh"), "--path").Output()
	if err != nil {
		return "", ErrNoKamaji
	}
	return strings.TrimSpace(string(out)), nil
}

// RealKamaji is the real Kamaji manager running as a host process against a management
// apiserver, with what it needs around it on a host with no kubelet:
//   - a TLS etcd with --client-cert-auth as its DataStore;
//   - a PodRunner that runs the kube-apiserver, kube-controller-manager and
//     kube-scheduler of every control-plane Deployment Kamaji makes and reports the
//     Deployment's status, as a kubelet and the Deployment controller would;
//   - a PlaneProxy that routes the in-cluster addresses Kamaji writes into kubeconfigs
//     to those kube-apiservers.
//
// Of Kamaji's webhook configurations only the TenantControlPlane defaulting one is
// registered (see registerDefaulting); its validation does not apply, which also lifts
// v1.0.0's cap of tenant versions at v1.30.2.
type RealKamaji struct {
	Mgmt   *Cluster
	Proxy  *PlaneProxy
	Runner *PodRunner
	// Dir holds the DataStore's PKI, the logs (kamaji.log, etcd.log, pods/...) and
	// Kamaji's temporary files; it is removed by Stop unless KeepDir is set.
	Dir string
	// EtcdEndpoint is the DataStore's endpoint (127.0.0.1:port).
	EtcdEndpoint string
	KeepDir      bool

	etcd      *hostproc.Process
	kamaji    *hostproc.Process
	lock      *os.File
	ownsProxy bool
	webhook   bool
}

// RealKamajiOptions shape StartRealKamaji.
type RealKamajiOptions struct {
	// Binary is the Kamaji manager; KamajiBinary() when empty.
	Binary string
	// Proxy routes planes' in-cluster addresses; a new one (not exported to this
	// process's environment) when nil. Pass the one TestMain exported for clients of
	// this process, such as the operator, to reach planes through it.
	Proxy *PlaneProxy
	// LockTimeout bounds the wait for another real Kamaji on this host (port 9443) to
	// stop; 5 minutes when zero.
	LockTimeout time.Duration
}

// StartRealKamaji starts a DataStore etcd, the pod runner and Kamaji against mgmt, and
// returns once Kamaji serves (its webhook port answers). The management cluster needs the
// Kamaji CRDs, which StartManagement installs from the pinned module.
func StartRealKamaji(ctx context.Context, mgmt *Cluster, o RealKamajiOptions) (_ *RealKamaji, err error) {
	bin := o.Binary
	if bin == "" {
		if bin, err = KamajiBinary(); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "computeplane-kamaji-")
	if err != nil {
		return nil, err
	}
	k := &RealKamaji{Mgmt: mgmt, Dir: dir, Proxy: o.Proxy}
	defer func() {
		if err != nil {
			// Logs, if any process ran, stay for the failure's reader.
			k.KeepDir = k.etcd != nil
			k.Stop()
			if k.KeepDir {
				err = fmt.Errorf("%w (logs kept in %s)", err, dir)
			}
		}
	}()
	if err := k.claimWebhookPort(o.LockTimeout); err != nil {
		return nil, err
	}
	binaries, err := controlPlaneBinaries(mgmt.Env.BinaryAssetsDirectory)
	if err != nil {
		return nil, err
	}
	if k.Proxy == nil {
		if k.Proxy, err = StartPlaneProxy(); err != nil {
			return nil, err
		}
		k.ownsProxy = true
	}
	if err := k.startDataStore(ctx, filepath.Join(mgmt.Env.BinaryAssetsDirectory, "etcd")); err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, "tmp")
	webhookCA, err := writeWebhookCerts(tmp)
	if err != nil {
		return nil, err
	}
	if err := k.writeIdentity(ctx); err != nil {
		return nil, err
	}
	k.Runner, err = StartPodRunner(mgmt.Client, k.Proxy, PodRunnerOptions{Dir: filepath.Join(dir, "pods"), Binaries: binaries})
	if err != nil {
		return nil, err
	}
	if err := k.startManager(bin, tmp); err != nil {
		return nil, err
	}
	if err := k.registerDefaulting(ctx, webhookCA.certPEM); err != nil {
		return nil, err
	}
	return k, nil
}

// controlPlaneBinaries maps the images of a control-plane Deployment's containers to the
// binaries test/tools/build.sh builds into assets (the management cluster's
// BinaryAssetsDirectory): the pod runner runs them.
func controlPlaneBinaries(assets string) (map[string]string, error) {
	if assets == "" {
		return nil, fmt.Errorf("the management cluster has no BinaryAssetsDirectory (KUBEBUILDER_ASSETS=$(test/tools/build.sh))")
	}
	binaries := map[string]string{}
	for _, name := range []string{kamajiAPIServerContainer, kamajiControllerManagerContainer, kamajiSchedulerContainer} {
		bin := filepath.Join(assets, name)
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("%s has no %s: KUBEBUILDER_ASSETS must be a directory test/tools/build.sh prints (it builds one): %w", assets, name, err)
		}
		binaries[name] = bin
	}
	return binaries, nil
}

// claimWebhookPort takes the host-wide lock of Kamaji's webhook port and checks that the
// port is free, waiting up to timeout (5 minutes when zero) for another real Kamaji.
func (k *RealKamaji) claimWebhookPort(timeout time.Duration) error {
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	var err error
	if k.lock, err = hostproc.Lock("computeplane-kamaji-webhook-9443", timeout); err != nil {
		return fmt.Errorf("another real Kamaji holds port %d on this host: %w", KamajiWebhookPort, err)
	}
	// Something that does not take the lock may hold the port: Kamaji would exit, and
	// the wait for it to serve could mistake that other server for Kamaji.
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", KamajiWebhookPort))
	if err != nil {
		return fmt.Errorf("port %d, which Kamaji's webhook server must bind, is in use: %w", KamajiWebhookPort, err)
	}
	_ = l.Close()
	return nil
}

// startDataStore makes the DataStore's PKI, starts its etcd and creates the DataStore.
func (k *RealKamaji) startDataStore(ctx context.Context, etcdBin string) error {
	// Kamaji signs each TenantControlPlane's etcd client certificate
	// (<tcp>-datastore-certificate) with this CA's key, which it parses as PKCS#1 only
	// (internal/crypto/crypto.go ParsePrivateKeyBytes: x509.ParsePKCS1PrivateKey).
	ca, err := newRSACA("computeplane-datastore-ca")
	if err != nil {
		return err
	}
	etcdCert, etcdKey, err := ca.issue("etcd", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		[]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return err
	}
	// Kamaji's own client certificate for the DataStore (tlsConfig.clientCertificate):
	// it creates each plane's etcd user and role with it. Without it Kamaji also writes
	// no server.crt/server.key into <tcp>-datastore-certificate
	// (internal/resources/datastore/datastore_certificate.go).
	clientCert, clientKey, err := ca.issue("root", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil)
	if err != nil {
		return err
	}
	pki := filepath.Join(k.Dir, "pki")
	if err := writeFiles(pki, map[string][]byte{"ca.crt": ca.certPEM, "etcd.crt": etcdCert, "etcd.key": etcdKey}); err != nil {
		return err
	}
	if err := k.startEtcd(etcdBin, pki, etcdCert, etcdKey, ca); err != nil {
		return err
	}
	return k.createDataStore(ctx, ca, clientCert, clientKey)
}

// writeWebhookCerts writes Kamaji's webhook serving certificates where controller-runtime
// looks by default ($TMPDIR/k8s-webhook-server/serving-certs/tls.{crt,key}, with tmp as
// TMPDIR), and their CA for --webhook-ca-path (read at start-up, cmd/manager/cmd.go
// PreRunE); it returns that CA.
func writeWebhookCerts(tmp string) (*rsaCA, error) {
	webhookCA, err := newRSACA("kamaji-webhook-ca")
	if err != nil {
		return nil, err
	}
	whCert, whKey, err := webhookCA.issue("kamaji-webhook-service.kamaji-system.svc", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		[]string{"kamaji-webhook-service.kamaji-system.svc", "localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return nil, err
	}
	return webhookCA, writeFiles(webhookCertDir(tmp), map[string][]byte{"tls.crt": whCert, "tls.key": whKey, "ca.crt": webhookCA.certPEM})
}

func webhookCertDir(tmp string) string {
	return filepath.Join(tmp, "k8s-webhook-server", "serving-certs")
}

// writeIdentity writes Kamaji's kubeconfig for the management cluster, as cluster-admin
// (its chart binds a ClusterRole close to it; the RBAC it ships is not what is under test
// here), and creates its --pod-namespace.
func (k *RealKamaji) writeIdentity(ctx context.Context) error {
	user, err := k.Mgmt.Env.AddUser(envtest.User{Name: "kamaji", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if err := writeFiles(k.Dir, map[string][]byte{"kubeconfig": kubeconfig}); err != nil {
		return err
	}
	if err := k.Mgmt.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KamajiNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// startManager runs the Kamaji manager and waits until it serves (its webhook port
// answers), 60 s at most.
func (k *RealKamaji) startManager(bin, tmp string) error {
	// Flags from cmd/manager/cmd.go of v1.0.0. cmdutils.CheckFlags refuses an empty
	// --pod-namespace or --serviceaccount-name (they default to $POD_NAMESPACE and
	// $SERVICE_ACCOUNT), and the default DataStore must exist before the manager starts
	// (datastoreutils.CheckExists).
	args := []string{"manager",
		"--leader-elect=false",
		"--disable-telemetry",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--datastore=" + KamajiDataStoreName,
		"--pod-namespace=" + KamajiNamespace,
		"--serviceaccount-name=kamaji",
		"--webhook-ca-path=" + filepath.Join(webhookCertDir(tmp), "ca.crt"),
		"--tmp-directory=" + filepath.Join(k.Dir, "kamaji-tmp"),
	}
	// KUBECONFIG for ctrl.GetConfigOrDie; TMPDIR for the webhook certificates; the proxy
	// for the soot manager, which reaches each ready plane at
	// https://<tcp>.<ns>.svc:<port> (internal/utilities/tenant_client.go GetRESTClientConfig).
	env := append(hostproc.EnvWithout("KUBECONFIG", "TMPDIR", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"),
		"KUBECONFIG="+filepath.Join(k.Dir, "kubeconfig"), "TMPDIR="+tmp)
	env = append(env, k.Proxy.Env()...)
	var err error
	if k.kamaji, err = hostproc.Start("kamaji", bin, args, env, filepath.Join(k.Dir, "kamaji.log")); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if k.kamaji.Exited() {
			return k.kamaji.ExitError()
		}
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", KamajiWebhookPort), time.Second); err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kamaji did not start serving in 60s; log %s ends:\n%s", k.kamaji.Log, k.kamaji.Tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kamajiMutatingWebhook is the name of the MutatingWebhookConfiguration Kamaji's chart
// installs (charts/kamaji/templates/mutatingwebhookconfiguration.yaml).
const kamajiMutatingWebhook = "kamaji-mutating-webhook-configuration"

// registerDefaulting registers Kamaji's TenantControlPlane defaulting webhook as its chart
// does, but by URL (there is no Service to route to the host process). It is required:
// with no spec.dataStore, the webhook sets the --datastore default
// (internal/webhook/handlers/tcp_defaults.go), and without it Kamaji's reconciler fails on
// every pass with `DataStore.kamaji.clastix.io "" not found` (its "migrate" resource reads
// spec.dataStore: internal/resources/datastore/datastore_migrate.go Define).
// The validating webhooks stay unregistered: they would cap tenant versions at v1.30.2
// and check Deployments Kamaji would build, which this test bed does not need.
func (k *RealKamaji) registerDefaulting(ctx context.Context, caPEM []byte) error {
	url := fmt.Sprintf("https://127.0.0.1:%d/mutate-kamaji-clastix-io-v1alpha1-tenantcontrolplane", KamajiWebhookPort)
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	wh := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: kamajiMutatingWebhook},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "mtenantcontrolplane.kb.io",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"kamaji.clastix.io"}, APIVersions: []string{"v1alpha1"},
					Resources: []string{"tenantcontrolplanes"}},
			}},
		}},
	}
	if err := k.Mgmt.Client.Create(ctx, wh); err != nil {
		return fmt.Errorf("registering Kamaji's defaulting webhook: %w", err)
	}
	k.webhook = true
	return nil
}

// Stop stops Kamaji, the pod runner's processes, etcd and the proxy it started, and
// releases the host-wide lock. Objects in the management cluster are left as they are.
func (k *RealKamaji) Stop() {
	if k == nil {
		return
	}
	if k.webhook {
		// failurePolicy Fail: with Kamaji gone, every TenantControlPlane write would fail.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = k.Mgmt.Client.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: kamajiMutatingWebhook}})
		cancel()
	}
	k.kamaji.Stop(10 * time.Second)
	if k.Runner != nil {
		k.Runner.Stop()
	}
	k.etcd.Stop(10 * time.Second)
	if k.ownsProxy && k.Proxy != nil {
		_ = k.Proxy.Close()
	}
	if k.lock != nil {
		_ = k.lock.Close() // releases the flock
	}
	if !k.KeepDir && k.Dir != "" {
		_ = os.RemoveAll(k.Dir)
	}
}

// Alive reports an error (with its log) if Kamaji has exited.
func (k *RealKamaji) Alive() error {
	if k.kamaji.Exited() {
		return k.kamaji.ExitError()
	}
	return nil
}

// LogTail is the end of Kamaji's log, for failure messages.
func (k *RealKamaji) LogTail(lines int) string { return k.kamaji.Tail(lines) }

func (k *RealKamaji) startEtcd(bin, pki string, certPEM, keyPEM []byte, ca *rsaCA) error {
	client, err := FreeAddr()
	if err != nil {
		return err
	}
	peer, err := FreeAddr()
	if err != nil {
		return err
	}
	k.EtcdEndpoint = client
	data := filepath.Join(k.Dir, "etcd")
	args := []string{
		"--name=datastore",
		"--data-dir=" + data,
		"--listen-client-urls=https://" + client,
		"--advertise-client-urls=https://" + client,
		"--listen-peer-urls=http://" + peer,
		"--initial-advertise-peer-urls=http://" + peer,
		"--initial-cluster=datastore=http://" + peer,
		"--cert-file=" + filepath.Join(pki, "etcd.crt"),
		"--key-file=" + filepath.Join(pki, "etcd.key"),
		"--trusted-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--client-cert-auth",
		"--unsafe-no-fsync",
	}
	if k.etcd, err = hostproc.Start("etcd", bin, args, hostproc.EnvWithout(), filepath.Join(k.Dir, "etcd.log")); err != nil {
		return err
	}
	// /health over mutual TLS, as Kamaji's clients will connect.
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.certPEM)
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil,
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if k.etcd.Exited() {
			return k.etcd.ExitError()
		}
		if resp, err := hc.Get("https://" + client + "/health"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the DataStore etcd is not healthy after 30s; log ends:\n%s", k.etcd.Tail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (k *RealKamaji) createDataStore(ctx context.Context, ca *rsaCA, clientCert, clientKey []byte) error {
	ds := &kamajiv1alpha1.DataStore{
		ObjectMeta: metav1.ObjectMeta{Name: KamajiDataStoreName},
		Spec: kamajiv1alpha1.DataStoreSpec{
			Driver:    kamajiv1alpha1.EtcdDriver,
			Endpoints: kamajiv1alpha1.Endpoints{k.EtcdEndpoint},
			TLSConfig: &kamajiv1alpha1.TLSConfig{
				CertificateAuthority: kamajiv1alpha1.CertKeyPair{
					Certificate: kamajiv1alpha1.ContentRef{Content: ca.certPEM},
					PrivateKey:  &kamajiv1alpha1.ContentRef{Content: ca.keyPEM},
				},
				ClientCertificate: &kamajiv1alpha1.ClientCertificate{
					Certificate: kamajiv1alpha1.ContentRef{Content: clientCert},
					PrivateKey:  kamajiv1alpha1.ContentRef{Content: clientKey},
				},
			},
		},
	}
	return k.Mgmt.Client.Create(ctx, ds)
}

// rsaCA is a certificate authority with an RSA key, PEM-encoded as PKCS#1
// ("RSA PRIVATE KEY"): the only form Kamaji v1.0.0 reads a DataStore CA key in.
type rsaCA struct {
	cert    *x509.Certificate
	key     *rsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// Ten years, as Kamaji's own certificates: its CertificateLifecycle controller asks for a
// rotation of any Secret whose first parseable certificate (the CA's, in
// <tcp>-datastore-certificate) expires within a day (controllers/certificate_lifecycle_controller.go).
func newRSACA(cn string) (*rsaCA, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &rsaCA{cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
	}, nil
}

// issue signs a leaf certificate; its key is PKCS#1 too.
func (ca *rsaCA) issue(cn string, usages []x509.ExtKeyUsage, dns []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: usages,
		DNSNames: dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
}

func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
