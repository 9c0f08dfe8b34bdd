package bench

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/devprovider"
	"github.com/cozystack/computeplane/test/operatortest"
)

// operator is a management apiserver with the operator's controllers set up on it, as
// production runs them (4 workers, 30 s requeue), not yet started.
type operator struct {
	scheme *runtime.Scheme
	mgmt   *devenv.Cluster
	op     *operatortest.Operator
}

// newOperator starts the management apiserver (stopped when the benchmark ends) and sets
// the controllers up; wrap, if set, wraps the operator's transport (to count requests).
func newOperator(b *testing.B, ctx context.Context, wrap func(http.RoundTripper) http.RoundTripper) *operator {
	b.Helper()
	scheme := controllers.NewScheme()
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = mgmt.Stop() })
	op, err := operatortest.New(ctx, mgmt, operatortest.Options{
		Options: controllers.Options{
			Setup:                 controllers.SetupOptions{Options: controller.Options{MaxConcurrentReconciles: 4}, ReconcileRequests: true},
			RequeueInterval:       30 * time.Second,
			PlaneTimeout:          5 * time.Second,
			PlaneUnreachableGrace: 10 * time.Second,
		},
		WrapTransport: wrap,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = op.Stop() })
	return &operator{scheme: scheme, mgmt: mgmt, op: op}
}

// start runs the manager and waits for its caches.
func (o *operator) start(b *testing.B, ctx context.Context) {
	b.Helper()
	if err := o.op.Start(ctx); err != nil {
		b.Fatal(err)
	}
}

// startProvider runs the dev provider (standing in for Kamaji and Cluster API) in a
// manager of its own, as an admin: the operator has only its shipped RBAC.
func (o *operator) startProvider(b *testing.B, ctx context.Context) *devprovider.Provider {
	b.Helper()
	provider, stop, err := devprovider.Start(ctx, o.mgmt.Config, o.scheme)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	return provider
}

// createClass creates a class that allows every namespace, with one CNI add-on.
func (o *operator) createClass(b *testing.B, ctx context.Context, name string) *cpv1.ComputePlaneClass {
	b.Helper()
	class := &cpv1.ComputePlaneClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: cpv1.ComputePlaneClassSpec{
		AllowedNamespaces: &metav1.LabelSelector{},
		KubernetesVersion: "v1.33.4",
		Addons: []cpv1.SystemAddon{{Name: "cilium", Role: cpv1.AddonRoleCNI, TargetNamespace: "kube-system",
			ChartRef: cpv1.AddonChartRef{Kind: "OCIRepository", Name: "cilium"}}},
		PodSecurity: cpv1.PodSecurityProfile{ExemptNamespaces: []string{"kube-system"}},
	}}
	if err := o.mgmt.Client.Create(ctx, class); err != nil {
		b.Fatal(err)
	}
	return class
}
