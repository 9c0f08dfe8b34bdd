// Package kamajireal runs the real Kamaji manager (v1.0.0, built by test/tools/kamaji.sh)
// against a management apiserver and checks what it makes, with the test bed of
// internal/devenv (RealKamaji: a TLS etcd DataStore, the pod runner, the CONNECT proxy).
//
// Run:
//
//	test/tools/kamaji.sh                      # once; ~8 min cold on two cores
//	KUBEBUILDER_ASSETS=$(test/tools/build.sh) go test -race ./test/kamajireal/
//
// Without the Kamaji binary the tests skip and say how to build it.
package kamajireal_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/test/testkit"
)

// proxy is exported to this process's environment before anything makes an HTTP request:
// net/http reads HTTPS_PROXY once per process.
var proxy *devenv.PlaneProxy

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	var err error
	if proxy, err = devenv.StartPlaneProxy(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := proxy.Export(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = proxy.Close()
	os.Exit(code)
}

// plane is a TenantControlPlane real Kamaji made Ready.
type plane struct {
	mgmt   *devenv.Cluster
	kamaji *devenv.RealKamaji
	tcp    *kamajiv1alpha1.TenantControlPlane
}

const ns, name = "tenant-a", "plane-a"

// startPlane starts a management apiserver and real Kamaji, creates a TenantControlPlane
// and waits for Kamaji to report it Ready.
func startPlane(t *testing.T, ctx context.Context) *plane {
	t.Helper()
	bin, err := devenv.KamajiBinary()
	if errors.Is(err, devenv.ErrNoKamaji) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The full management cluster (the operator's CRDs, RBAC and admission policies, as
	// the controllers suite has it): Kamaji's writes pass its policies.
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: controllers.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgmt.Stop() })

	start := time.Now()
	kamaji, err := devenv.StartRealKamaji(ctx, mgmt, devenv.RealKamajiOptions{Binary: bin, Proxy: proxy})
	if err != nil {
		t.Fatal(err)
	}
	kamaji.KeepDir = os.Getenv("KEEP_KAMAJI_DIR") != ""
	t.Cleanup(kamaji.Stop)
	t.Logf("Kamaji, its DataStore etcd (%s) and the pod runner started in %s; logs in %s",
		kamaji.EtcdEndpoint, time.Since(start).Round(time.Millisecond), kamaji.Dir)

	if err := mgmt.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// No spec.dataStore: Kamaji's defaulting webhook sets --datastore. The version is
	// what v1.0.0 supports (its validating webhook, not registered here, would cap it at
	// v1.30.2); the pod runner runs the kube-apiserver test/tools/build.sh built
	// (v1.36.3) whatever the version says.
	tcp := &kamajiv1alpha1.TenantControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kamajiv1alpha1.TenantControlPlaneSpec{
			ControlPlane: kamajiv1alpha1.ControlPlane{
				Deployment: kamajiv1alpha1.DeploymentSpec{Replicas: ptr.To(int32(1))},
				Service:    kamajiv1alpha1.ServiceSpec{ServiceType: kamajiv1alpha1.ServiceTypeClusterIP},
			},
			Kubernetes: kamajiv1alpha1.KubernetesSpec{Version: "v1.30.2", Kubelet: kamajiv1alpha1.KubeletSpec{CGroupFS: "systemd"}},
			// The add-ons the operator's KamajiControlPlane asks for
			// (controllers/render/cluster.go), which Kamaji's CAPI provider copies here.
			// Konnectivity adds a konnectivity-server container (not run) and an egress
			// selector the pod runner drops. The Go types send server.port: 0 (the field
			// has no omitempty, so the CRD's default never applies) and Kamaji's
			// Deployment update is then refused (containerPort: Required value): give
			// the CRD's default port explicitly.
			Addons: kamajiv1alpha1.AddonsSpec{
				CoreDNS:   &kamajiv1alpha1.AddonSpec{},
				KubeProxy: &kamajiv1alpha1.AddonSpec{},
				Konnectivity: &kamajiv1alpha1.KonnectivitySpec{
					KonnectivityServerSpec: kamajiv1alpha1.KonnectivityServerSpec{Port: 8132},
				},
			},
		},
	}
	created := time.Now()
	if err := mgmt.Client.Create(ctx, tcp); err != nil {
		t.Fatal(err)
	}
	if tcp.Spec.DataStore != devenv.KamajiDataStoreName {
		t.Errorf("spec.dataStore %q after Kamaji's defaulting webhook, want %q", tcp.Spec.DataStore, devenv.KamajiDataStoreName)
	}

	// Ready as the operator reads it: status.kubernetesResources.version.status.
	var kubeconfigAt time.Duration
	testkit.Poll(t, 3*time.Minute, 100*time.Millisecond, func() error {
		if err := kamaji.Alive(); err != nil {
			t.Fatal(err)
		}
		if err := mgmt.Client.Get(ctx, client.ObjectKeyFromObject(tcp), tcp); err != nil {
			return err
		}
		if kubeconfigAt == 0 && tcp.Status.KubeConfig.Admin.SecretName != "" {
			kubeconfigAt = time.Since(created)
		}
		if s := tcp.Status.Kubernetes.Version.Status; s == nil || *s != kamajiv1alpha1.VersionReady {
			return fmt.Errorf("TenantControlPlane version status %v; %s\nKamaji log ends:\n%s",
				ptr.Deref(s, "<none>"), kamaji.Runner.Describe(ns, name), kamaji.LogTail(10))
		}
		return nil
	})
	t.Logf("TenantControlPlane Ready %s after creation (admin kubeconfig named after %s); endpoint %s",
		time.Since(created).Round(time.Millisecond), kubeconfigAt.Round(time.Millisecond), tcp.Status.ControlPlaneEndpoint)
	return &plane{mgmt: mgmt, kamaji: kamaji, tcp: tcp}
}

// TestRealKamajiMakesAReachablePlane: real Kamaji turns a TenantControlPlane Ready through
// the pod runner, and the super-admin.svc kubeconfig it wrote reaches the plane through
// the proxy, as the operator would read it, with no product change.
func TestRealKamajiMakesAReachablePlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := startPlane(t, ctx)
	mgmt, kamaji, tcp, scheme := p.mgmt, p.kamaji, p.tcp, p.mgmt.Client.Scheme()

	secret := &corev1.Secret{}
	if err := mgmt.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: tcp.Status.KubeConfig.Admin.SecretName}, secret); err != nil {
		t.Fatal(err)
	}
	if secret.Name != devenv.AdminKubeconfigSecretName(name) {
		t.Errorf("admin kubeconfig Secret %q, want %q", secret.Name, devenv.AdminKubeconfigSecretName(name))
	}

	// What Kamaji wrote under each key: server and identity.
	wantServer := map[string]string{
		devenv.AdminKubeconfigKey:         "https://" + tcp.Status.ControlPlaneEndpoint,
		devenv.SuperAdminKubeconfigKey:    "https://" + tcp.Status.ControlPlaneEndpoint,
		devenv.AdminSvcKubeconfigKey:      fmt.Sprintf("https://%s.%s.svc:%d", name, ns, tcp.Spec.NetworkProfile.Port),
		devenv.SuperAdminSvcKubeconfigKey: fmt.Sprintf("https://%s.%s.svc:%d", name, ns, tcp.Spec.NetworkProfile.Port),
	}
	wantUser := map[string]string{
		devenv.AdminKubeconfigKey:         "CN=kubernetes-admin O=[kubeadm:cluster-admins]",
		devenv.AdminSvcKubeconfigKey:      "CN=kubernetes-admin O=[kubeadm:cluster-admins]",
		devenv.SuperAdminKubeconfigKey:    "CN=kubernetes-super-admin O=[system:masters]",
		devenv.SuperAdminSvcKubeconfigKey: "CN=kubernetes-super-admin O=[system:masters]",
	}
	keys := make([]string, 0, len(secret.Data))
	for k := range secret.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t.Logf("%s keys: %v", secret.Name, keys)
	for _, key := range []string{devenv.AdminKubeconfigKey, devenv.AdminSvcKubeconfigKey, devenv.SuperAdminKubeconfigKey, devenv.SuperAdminSvcKubeconfigKey} {
		server, user, err := describeKubeconfig(secret.Data[key])
		if err != nil {
			t.Errorf("%s: %v", key, err)
			continue
		}
		t.Logf("%-16s server %s, user %s", key, server, user)
		if server != wantServer[key] {
			t.Errorf("%s: server %s, want %s", key, server, wantServer[key])
		}
		if user != wantUser[key] {
			t.Errorf("%s: user %s, want %s", key, user, wantUser[key])
		}
	}
	t.Logf("proxy routes: %v", proxy.Routes())

	// The operator's parser (remote.ParseAdminKubeconfig) accepts what Kamaji wrote under
	// every key, with the servers the operator allows: those the TenantControlPlane
	// reports (controllers/computeplane_provision.go controlPlaneServers, copied here).
	servers := []string{"https://" + tcp.Status.ControlPlaneEndpoint}
	for _, domain := range []string{"svc", "svc.cluster.local"} {
		servers = append(servers, fmt.Sprintf("https://%s.%s.%s:%d", name, ns, domain, tcp.Spec.NetworkProfile.Port))
	}
	for _, key := range []string{devenv.AdminKubeconfigKey, devenv.AdminSvcKubeconfigKey, devenv.SuperAdminKubeconfigKey, devenv.SuperAdminSvcKubeconfigKey} {
		cred, err := remote.ParseAdminKubeconfig(secret.Data[key], servers)
		if err != nil {
			t.Errorf("the operator refuses Kamaji's %s: %v", key, err)
			continue
		}
		t.Logf("the operator accepts %s: server %s, identity %s", key, cred.Server, cred.Identity)
	}
	cred, err := remote.ParseAdminKubeconfig(secret.Data[devenv.SuperAdminSvcKubeconfigKey], servers)
	if err != nil {
		t.Fatal(err)
	}
	if cred.Identity != devenv.AdminUser {
		t.Errorf("identity of super-admin.svc as the operator reads it: %s, want %s", cred.Identity, devenv.AdminUser)
	}

	// The plane, through the credential the operator parsed from super-admin.svc and
	// HTTPS_PROXY: what the operator does (its own transport also takes the proxy from
	// the environment: remote/plane_transport.go).
	cfg, err := cred.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	plane, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var nsl corev1.NamespaceList
	if err := plane.List(ctx, &nsl); err != nil {
		t.Fatalf("listing namespaces in the plane through %s: %v\n%s", cfg.Host, err, kamaji.Runner.Describe(ns, name))
	}
	var names []string
	for _, n := range nsl.Items {
		names = append(names, n.Name)
	}
	t.Logf("namespaces in the plane through %s: %v", cfg.Host, names)
	if !strings.Contains(strings.Join(names, ","), "kube-system") {
		t.Errorf("the plane has no kube-system: %v", names)
	}
	// It is the plane, not the management cluster.
	if err := plane.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); err == nil {
		t.Errorf("namespace %s of the management cluster is visible through the plane's kubeconfig", ns)
	}
	// The plane's own controllers run: its kube-controller-manager gives a new namespace
	// its default ServiceAccount and kube-root-ca.crt, as in any cluster.
	fresh := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}
	if err := plane.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, time.Minute, 100*time.Millisecond, func() error {
		if err := plane.Get(ctx, client.ObjectKey{Namespace: "fresh", Name: "default"}, &corev1.ServiceAccount{}); err != nil {
			return fmt.Errorf("%w\n%s", err, kamaji.Runner.Describe(ns, name))
		}
		return plane.Get(ctx, client.ObjectKey{Namespace: "fresh", Name: "kube-root-ca.crt"}, &corev1.ConfigMap{})
	})

	// admin.conf names the ClusterIP; kubernetes-admin's rights come from the
	// kubeadm:cluster-admins binding, which Kamaji's soot manager creates in the plane
	// (controllers/soot/manager.go, kubeadm phase ClusterAdminRBAC) once it is Ready,
	// itself reaching the plane through the proxy.
	acfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[devenv.AdminKubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(acfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		return admin.List(ctx, &corev1.NamespaceList{})
	})
	t.Logf("kubernetes-admin lists namespaces through %s (the ClusterIP, via the proxy)", acfg.Host)
}

// TestRealKamajiRenewsTheAPIServerCertificate: with its serving certificate's Secret
// deleted, Kamaji issues a new one (internal/resources/api_server_certificate.go), the
// pod template's hash label changes (deployment.go templateLabels), and the rollout
// (maxSurge 100%) moves the plane to a kube-apiserver serving the new certificate. The
// TenantControlPlane's status is sampled all along: whether it leaves Ready is recorded.
func TestRealKamajiRenewsTheAPIServerCertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := startPlane(t, ctx)
	c := p.mgmt.Client
	secretName := p.tcp.Status.Certificates.APIServer.SecretName
	if secretName == "" {
		t.Fatal("status.certificates.apiServer.secretName is empty")
	}
	kubeconfig := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.tcp.Status.KubeConfig.Admin.SecretName}, kubeconfig); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig.Data[devenv.SuperAdminSvcKubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	oldSerial := servedSerial(t, cfg.Host, cfg.CAData)
	oldAddr, _ := p.kamaji.Runner.APIServer(ns, name)
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, dep); err != nil {
		t.Fatal(err)
	}
	oldGeneration := dep.Generation

	// Sample the TenantControlPlane's version status while the renewal rolls out.
	statuses := map[string]int{}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			tcp := &kamajiv1alpha1.TenantControlPlane{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tcp); err == nil {
				statuses[string(ptr.Deref(tcp.Status.Kubernetes.Version.Status, "<none>"))]++
			}
		}
	}()

	deleted := time.Now()
	if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName}}); err != nil {
		t.Fatal(err)
	}
	var newSerial string
	testkit.Poll(t, 2*time.Minute, 100*time.Millisecond, func() error {
		if err := p.kamaji.Alive(); err != nil {
			t.Fatal(err)
		}
		addr, _ := p.kamaji.Runner.APIServer(ns, name)
		if addr == oldAddr {
			return fmt.Errorf("the old kube-apiserver (%s) still serves; %s", oldAddr, p.kamaji.Runner.Describe(ns, name))
		}
		newSerial = servedSerial(t, cfg.Host, cfg.CAData)
		if newSerial == oldSerial {
			return fmt.Errorf("the plane still serves certificate %s", oldSerial)
		}
		return nil
	})
	renewed := time.Since(deleted)
	// The super-admin kubeconfig is unchanged (same CA) and still works.
	plane, err := client.New(cfg, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() error { return plane.List(ctx, &corev1.NamespaceList{}) })
	close(stop)
	<-sampled
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, dep); err != nil {
		t.Fatal(err)
	}
	t.Logf("serving certificate %s -> %s in %s; Deployment generation %d -> %d; kube-apiserver %s -> %s",
		oldSerial, newSerial, renewed.Round(time.Millisecond), oldGeneration, dep.Generation, oldAddr, mustAddr(p.kamaji.Runner.APIServer(ns, name)))
	t.Logf("TenantControlPlane version status samples during the renewal: %v", statuses)
	tcp := &kamajiv1alpha1.TenantControlPlane{}
	testkit.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tcp); err != nil {
			return err
		}
		if s := ptr.Deref(tcp.Status.Kubernetes.Version.Status, ""); s != kamajiv1alpha1.VersionReady {
			return fmt.Errorf("TenantControlPlane version status %s after the renewal", s)
		}
		return nil
	})
}

// TestRealKamajiPlaneCrashesAndIsDeleted: the plane's kube-apiserver dies (SIGKILL); the
// pod runner reports the Deployment unavailable, Kamaji reports the TenantControlPlane
// NotReady (k8s_deployment_resource.go isNotReady), and Ready again once the runner has
// restarted it. Then the TenantControlPlane is deleted: Kamaji's finalizers run, and the
// pod runner, playing the garbage collector, deletes the Deployment and stops the plane.
func TestRealKamajiPlaneCrashesAndIsDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := startPlane(t, ctx)
	c := p.mgmt.Client
	status := func() kamajiv1alpha1.KubernetesVersionStatus {
		tcp := &kamajiv1alpha1.TenantControlPlane{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tcp); err != nil {
			return kamajiv1alpha1.KubernetesVersionStatus("error: " + err.Error())
		}
		return ptr.Deref(tcp.Status.Kubernetes.Version.Status, "<none>")
	}
	killed := time.Now()
	if err := p.kamaji.Runner.Kill(ns, name); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		if s := status(); s != kamajiv1alpha1.VersionNotReady {
			return fmt.Errorf("version status %s after the kill, want NotReady", s)
		}
		return nil
	})
	notReady := time.Since(killed)
	testkit.Eventually(t, time.Minute, func() error {
		if s := status(); s != kamajiv1alpha1.VersionReady {
			return fmt.Errorf("version status %s, want Ready again; %s", s, p.kamaji.Runner.Describe(ns, name))
		}
		return nil
	})
	t.Logf("killed: NotReady after %s, Ready again after %s", notReady.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))

	deleted := time.Now()
	if err := c.Delete(ctx, p.tcp); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		tcp := &kamajiv1alpha1.TenantControlPlane{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p.tcp), tcp); err == nil {
			return fmt.Errorf("TenantControlPlane still there, finalizers %v; Kamaji log ends:\n%s", tcp.Finalizers, p.kamaji.LogTail(5))
		} else if !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
	gone := time.Since(deleted)
	// The pod runner plays the garbage collector for the Deployment: the plane stops,
	// and its addresses are routed nowhere.
	testkit.Eventually(t, time.Minute, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the Deployment after its TenantControlPlane is gone: %v", err)
		}
		if addr, ok := p.kamaji.Runner.APIServer(ns, name); ok {
			return fmt.Errorf("the plane's kube-apiserver still runs at %s", addr)
		}
		return nil
	})
	t.Logf("TenantControlPlane gone %s after its deletion, its Deployment and kube-apiserver %s after; proxy routes left: %v",
		gone.Round(time.Millisecond), time.Since(deleted).Round(time.Millisecond), proxy.Routes())
	if routes := proxy.Routes(); len(routes) != 0 {
		t.Errorf("routes left after the plane is gone: %v", routes)
	}
}

// TestRealKamajiRefusesABusyWebhookPort: Kamaji v1.0.0 binds :9443 with no way to move it;
// when something else holds the port, StartRealKamaji says so instead of starting a
// Kamaji that would exit (or mistaking the other server for it).
func TestRealKamajiRefusesABusyWebhookPort(t *testing.T) {
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", devenv.KamajiWebhookPort))
	if err != nil {
		t.Skipf("port %d is busy already: %v", devenv.KamajiWebhookPort, err)
	}
	defer l.Close()
	// Nothing is started before the port is checked: no apiserver or binary is needed.
	mgmt := &devenv.Cluster{Env: &envtest.Environment{BinaryAssetsDirectory: t.TempDir()}}
	_, err = devenv.StartRealKamaji(context.Background(), mgmt, devenv.RealKamajiOptions{Binary: "/nonexistent/kamaji", Proxy: proxy})
	if err == nil || !strings.Contains(err.Error(), "is in use") {
		t.Fatalf("StartRealKamaji with port %d taken: %v, want an error saying it is in use", devenv.KamajiWebhookPort, err)
	}
	t.Log(err)
}

// servedSerial is the serial number of the certificate the plane serves at host,
// reached through HTTPS_PROXY (a new connection each time).
func servedSerial(t *testing.T, host string, caPEM []byte) string {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(host + "/readyz")
	if err != nil {
		return "unreachable: " + err.Error()
	}
	_ = resp.Body.Close()
	return resp.TLS.PeerCertificates[0].SerialNumber.Text(16)
}

func mustAddr(addr string, _ bool) string { return addr }

// describeKubeconfig returns a kubeconfig's server and its client certificate's subject.
func describeKubeconfig(b []byte) (server, user string, err error) {
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return "", "", err
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return "", "", fmt.Errorf("no current context")
	}
	cluster, auth := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cluster == nil || auth == nil {
		return "", "", fmt.Errorf("context %s names no cluster or user", cfg.CurrentContext)
	}
	block, _ := pem.Decode(auth.ClientCertificateData)
	if block == nil {
		return cluster.Server, "", fmt.Errorf("user %s has no inline client certificate", ctx.AuthInfo)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return cluster.Server, "", err
	}
	return cluster.Server, fmt.Sprintf("CN=%s O=%v", cert.Subject.CommonName, cert.Subject.Organization), nil
}
