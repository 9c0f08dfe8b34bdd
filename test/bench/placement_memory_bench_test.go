package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/operatortest"
)

// BenchmarkPlacementReleaseMemory: the manager's memory (the real binary, production
// flags) once a tenant has created RELEASES_N (default 1,000) placement releases with 1 MiB
// of values each in its plane's namespace (about a GiB in the management apiserver), and
// the placement controller has counted them all. What a tenant may make large must not
// reach the operator's memory.
func BenchmarkPlacementReleaseMemory(b *testing.B) {
	n := 1000
	if s := os.Getenv("RELEASES_N"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// With the webhooks, as in production: each release is stored routed and with its
	// finalizer, so nothing but the create writes its MiB (a release the placement
	// controller had to patch would be written twice, past etcd's 2 GiB quota).
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: controllers.NewScheme(), Webhooks: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = mgmt.Stop() })
	proc, err := operatortest.StartProcess(ctx, mgmt, operatortest.ProcessOptions{Args: []string{"--leader-elect=false"}, Webhooks: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(proc.Stop)
	c := mgmt.Client
	o := &operator{mgmt: mgmt}
	class := o.createClass(b, ctx, "memory")
	class.Spec.PlacementReleases.MaxReleases = int32(n)
	if err := c.Update(ctx, class); err != nil {
		b.Fatal(err)
	}
	ns := "tenant-memory"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	plane := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plane"}, Spec: cpv1.ComputePlaneSpec{ClassName: class.Name}}
	if err := c.Create(ctx, plane); err != nil {
		b.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	before := sampleMemory(b, proc)

	values := &apiextensionsv1.JSON{Raw: []byte(`{"blob":"` + strings.Repeat("v", 1<<20-16) + `"}`)}
	t0 := time.Now()
	for i := range n {
		hr := &helmv2.HelmRelease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("app-%d", i),
				Labels: map[string]string{cpv1.PlacementLabel: cpv1.PlacementLabelValue}},
			Spec: helmv2.HelmReleaseSpec{Interval: metav1.Duration{Duration: time.Minute},
				ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "app"}, Values: values},
		}
		if err := c.Create(ctx, hr); err != nil {
			b.Fatalf("release %d: %v", i, err)
		}
	}
	created := time.Since(t0)
	// Counted by the placement controller: every release is in its cache.
	for {
		got := &cpv1.ComputePlane{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(plane), got); err != nil {
			b.Fatal(err)
		}
		if pl := got.Status.Placement; pl != nil && int(pl.Held+pl.Routed+pl.Refused) == n {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("the placement controller did not count %d releases: %+v", n, got.Status.Placement)
		}
		time.Sleep(time.Second)
	}
	counted := time.Since(t0)
	time.Sleep(10 * time.Second)
	after := sampleMemory(b, proc)
	b.Logf("%d placement releases of 1 MiB values (created in %s, all counted after %s)", n, created.Round(time.Second), counted.Round(time.Second))
	b.Logf("manager RSS %.1f → %.1f MiB (anonymous %.1f → %.1f), heap in use %.1f → %.1f MiB",
		mib(before.rss), mib(after.rss), mib(before.rssAnon), mib(after.rssAnon), mib(before.heapInuse), mib(after.heapInuse))
	b.ReportMetric(mib(after.rss), "rss-MiB")
	b.ReportMetric(mib(after.heapInuse), "heap-inuse-MiB")
}
