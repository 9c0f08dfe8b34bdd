package controllers_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/cozystack/computeplane/test/testkit"

	"github.com/cozystack/computeplane/controllers/computeplane"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/operatortest"
)

// The suite shares one management apiserver and one running manager (webhook included);
// each test works in namespaces of its own.
var (
	mgmt *devenv.Cluster
	k8s  client.Client
	// reconciler is the running ComputePlane reconciler (tests look into its plane cache).
	reconciler *computeplane.Reconciler
	// metricsAddr is where the manager serves /metrics, as the shipped manager does
	// (HTTPS, authenticated and authorized by the management apiserver).
	metricsAddr string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	if testing.Verbose() {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	}
	scheme := controllers.NewScheme()
	var err error
	mgmt, err = devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme, Webhooks: true, Audit: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = mgmt.Stop() }()
	k8s = mgmt.Client

	if metricsAddr, err = devenv.FreeAddr(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op, err := operatortest.Start(ctx, mgmt, operatortest.Options{
		Options: controllers.Options{
			Setup:                 controllers.SetupOptions{Options: controller.Options{MaxConcurrentReconciles: 2}, ReconcileRequests: true},
			RequeueInterval:       2 * time.Second,
			PlaneTimeout:          2 * time.Second,
			PlaneUnreachableGrace: 1 * time.Second,
			// Long enough that a test relying on a full read instead of the watches fails.
			PlaneResyncInterval: time.Minute,
			Webhooks:            true,
			CapabilityLabel:     cpv1.DefaultCapabilityLabel,
		},
		MetricsAddr:  metricsAddr,
		RecoverPanic: ptr.To(false), // a panicking reconcile fails the run instead of being logged
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	reconciler = op.Reconciler
	code := m.Run()
	if code == 0 && !rbacMatchesUse() {
		code = 1
	}
	if err := op.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 1
	}
	return code
}

// eventually polls f until it returns nil, failing the test with f's last error.
var eventually = testkit.Eventually

// conditionIs returns a check that plane's condition t has status s and reason.
func conditionIs(ctx context.Context, key client.ObjectKey, t string, s metav1.ConditionStatus, reason string) func() error {
	return func() error {
		p := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, p); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(p.Status.Conditions, t)
		if c == nil {
			return fmt.Errorf("no %s condition in %+v", t, p.Status.Conditions)
		}
		if c.Status != s || c.Reason != reason {
			return fmt.Errorf("%s = %s/%s (%s), want %s/%s", t, c.Status, c.Reason, c.Message, s, reason)
		}
		return nil
	}
}

// mustWatchClient is a client of the management apiserver that reads around every cache.
func mustWatchClient(t *testing.T) client.WithWatch {
	t.Helper()
	c, err := client.NewWithWatch(mgmt.Config, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
