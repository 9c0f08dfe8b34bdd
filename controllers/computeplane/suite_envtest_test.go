package computeplane

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/internal/devenv"
)

// The package's own tests of what the controllers suite (controllers/) cannot reach
// from outside: single steps of a reconcile, against a real management apiserver with
// the upstream CRDs and no manager.
var (
	mgmt *devenv.Cluster
	k8s  client.Client
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(cpv1.AddToScheme(s))
	utilruntime.Must(helmv2.AddToScheme(s))
	var err error
	if mgmt, err = devenv.StartManagement(devenv.ManagementOptions{Scheme: s}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = mgmt.Stop() }()
	k8s = mgmt.Client
	return m.Run()
}

// tenantPlane creates a tenant namespace and, in it, a plane of class (which need not
// exist), read back from the API.
func tenantPlane(t *testing.T, ctx context.Context, class string) *cpv1.ComputePlane {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-" + rand.String(6)}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	p := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "plane"}, Spec: cpv1.ComputePlaneSpec{ClassName: class}}
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}
