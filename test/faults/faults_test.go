// Package faults breaks what the operator depends on while it works, and measures how
// long it takes to notice and to recover: a plane's apiserver killed (with an impostor
// on its address), its etcd stopped, its admin credential rotated, the manager killed
// with SIGKILL at every provisioning and teardown stage, the management apiserver
// restarted. The manager is the shipped binary (cmd/manager) in its own process, so a
// kill is a kill; the dev provider stands in for Kamaji with a real apiserver per plane.
// `make faults` runs it (COMPUTEPLANE_FAULTS=1); the figures are printed at the end and
// recorded in docs/benchmarks.md.
package faults

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/devprovider"
	"github.com/cozystack/computeplane/test/operatortest"
	"github.com/cozystack/computeplane/test/testkit"
)

// The manager's flags: production's, but for the pace (a waiting plane looks again in
// seconds, a dead plane is reported after 8 s, a pass gives up after 8 s) and a 4 s lease, so a killed leader's
// successor takes over in seconds rather than 15.
var managerArgs = []string{
	"--requeue-interval=5s", "--plane-timeout=3s", "--plane-pass-timeout=8s", "--plane-unreachable-grace=8s",
	"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=1s",
}

var (
	scheme   *runtime.Scheme
	mgmt     *devenv.Cluster
	k8s      client.Client
	provider *devprovider.Provider
	manager  *operatortest.Process
	class    *cpv1.ComputePlaneClass
)

func TestMain(m *testing.M) {
	if os.Getenv("COMPUTEPLANE_FAULTS") == "" {
		fmt.Println("faults: COMPUTEPLANE_FAULTS is not set (make faults sets it); skipping the fault suite")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	scheme = controllers.NewScheme()
	var err error
	if mgmt, err = devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme, Audit: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = mgmt.Stop() }()
	k8s = mgmt.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stopProvider func()
	// Audited planes: a test tells from a plane's log who asked it what, with which
	// certificate.
	// Each behind a latency proxy, so a test can make one answer slowly.
	audited := devprovider.Options{Tenant: devenv.TenantOptions{Audit: true, Latency: true}}
	if provider, stopProvider, err = devprovider.StartWith(ctx, mgmt.Config, scheme, audited); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopProvider()
	class = &cpv1.ComputePlaneClass{ObjectMeta: metav1.ObjectMeta{Name: "faults"}, Spec: cpv1.ComputePlaneClassSpec{
		AllowedNamespaces: &metav1.LabelSelector{},
		KubernetesVersion: "v1.33.4",
		Addons: []cpv1.SystemAddon{{Name: "cilium", Role: cpv1.AddonRoleCNI, TargetNamespace: "kube-system",
			ChartRef: cpv1.AddonChartRef{Kind: "OCIRepository", Name: "cilium", Namespace: "cozy-system"}}},
		PodSecurity: cpv1.PodSecurityProfile{ExemptNamespaces: []string{"kube-system"}},
		NodeGroups:  cpv1.NodeGroupLimits{MaxGroups: 4, MaxReplicas: 5, InstanceTypes: []string{"u1.medium"}},
	}}
	if err := k8s.Create(ctx, class); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Restarted whenever it exits, as the kubelet would: a test kills it, or it loses
	// its lease while the management apiserver is down.
	if manager, err = operatortest.StartProcess(ctx, mgmt, operatortest.ProcessOptions{Args: managerArgs, Restart: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer manager.Stop()

	code := m.Run()
	if refused, _, err := devenv.Refused(mgmt.AuditLog); err != nil || len(refused) > 0 {
		fmt.Fprintf(os.Stderr, "RBAC audit: the operator was refused %v (%v)\n", refused, err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintln(os.Stderr, manager.Tail())
	}
	printFigures()
	return code
}

// figures are what each fault cost, printed at the end for docs/benchmarks.md.
var figures struct {
	sync.Mutex
	rows []string
}

func figure(t *testing.T, what string, d time.Duration) {
	t.Helper()
	t.Logf("FIGURE %s: %s", what, d.Round(time.Millisecond))
	figures.Lock()
	defer figures.Unlock()
	figures.rows = append(figures.rows, fmt.Sprintf("| %s | %s | %s |", t.Name(), what, d.Round(10*time.Millisecond)))
}

func note(t *testing.T, what, value string) {
	t.Helper()
	t.Logf("FIGURE %s: %s", what, value)
	figures.Lock()
	defer figures.Unlock()
	figures.rows = append(figures.rows, fmt.Sprintf("| %s | %s | %s |", t.Name(), what, value))
}

func printFigures() {
	figures.Lock()
	defer figures.Unlock()
	fmt.Println("\n| fault | what | figure |\n| --- | --- | --- |")
	fmt.Println(strings.Join(figures.rows, "\n"))
}

// waitFor polls f every 25 ms and returns how long it took to hold.
func waitFor(t *testing.T, timeout time.Duration, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	testkit.Poll(t, timeout, 25*time.Millisecond, f)
	return time.Since(start)
}

func tenantOf(t *testing.T, ctx context.Context, p *cpv1.ComputePlane) *devenv.Cluster {
	t.Helper()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	tenant := provider.Tenant(types.NamespacedName{Namespace: p.Status.InfrastructureNamespace, Name: render.ClusterName(p)})
	if tenant == nil {
		t.Fatal("the dev provider runs no apiserver for the plane")
	}
	return tenant
}

func newPlane(t *testing.T, ctx context.Context) *cpv1.ComputePlane {
	t.Helper()
	return testkit.NewTenantPlane(t, ctx, k8s, class.Name)
}

func readyIs(ctx context.Context, p *cpv1.ComputePlane, want metav1.ConditionStatus) func() error {
	return testkit.ReadyIs(ctx, k8s, p, want)
}

// gateClosed checks what a closed gate means for placement: no applier kubeconfig.
func gateClosed(ctx context.Context, p *cpv1.ComputePlane) error {
	return testkit.ApplierRevoked(ctx, k8s, p)()
}
