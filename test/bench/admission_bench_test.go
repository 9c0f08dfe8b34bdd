package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/operatortest"
)

// BenchmarkReleaseAdmission: what a HelmRelease create costs with the operator's
// admission in the path, over 1,000 sequential creates per kind of release (the
// management apiserver, the webhooks served by the running manager over loopback TLS):
// a placement release (mutated, then judged with a read of the namespace's planes and
// of their class), an unlabelled release in a plane's namespace naming nothing (matched
// against the classes' placement selectors from the cache and judged without a read),
// one naming a Secret shaped like an applier kubeconfig (one GET of the plane it names),
// an unlabelled release in a namespace without a plane, and a release of an application
// kind the class places by its selector (labelled and routed, then judged as a placement
// release).
// Prints p50 and p99 of the client-side create latency.
func BenchmarkReleaseAdmission(b *testing.B) {
	const n = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: controllers.NewScheme(), Webhooks: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = mgmt.Stop() })
	op, err := operatortest.Start(ctx, mgmt, operatortest.Options{Options: controllers.Options{
		Setup:                 controllers.SetupOptions{Options: controller.Options{MaxConcurrentReconciles: 4}},
		RequeueInterval:       30 * time.Second,
		PlaneTimeout:          5 * time.Second,
		PlaneUnreachableGrace: 10 * time.Second,
		Webhooks:              true,
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = op.Stop() })
	c := mgmt.Client

	o := &operator{mgmt: mgmt}
	class := o.createClass(b, ctx, "admission")
	withPlane, without := "admission-plane", "admission-none"
	for _, ns := range []string{withPlane, without} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
	}
	// The class places one application kind by its label: every unlabelled release is
	// matched against it (from the manager's cache) on its way in.
	patch := client.MergeFrom(class.DeepCopy())
	class.Spec.PlacementReleases.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"apps.example.com/kind": "notebook"}}
	class.Spec.PlacementReleases.MaxReleases = 5000 // the two placement cases create 2,000
	if err := c.Patch(ctx, class, patch); err != nil {
		b.Fatal(err)
	}
	plane := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: withPlane, Name: "plane"}, Spec: cpv1.ComputePlaneSpec{ClassName: class.Name}}
	if err := c.Create(ctx, plane); err != nil {
		b.Fatal(err)
	}

	release := func(ns, name string, placement bool, valuesFrom string) *helmv2.HelmRelease {
		hr := &helmv2.HelmRelease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: helmv2.HelmReleaseSpec{Interval: metav1.Duration{Duration: time.Minute},
				ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "app"}},
		}
		if placement {
			hr.Labels = map[string]string{cpv1.PlacementLabel: cpv1.PlacementLabelValue}
		}
		if valuesFrom != "" {
			hr.Spec.ValuesFrom = []helmv2.ValuesReference{{Kind: "Secret", Name: valuesFrom}}
		}
		return hr
	}
	cases := []struct {
		name string
		make func(name string) client.Object
	}{
		{"unlabelled, plane namespace", func(name string) client.Object { return release(withPlane, "u-"+name, false, "") }},
		{"unlabelled, names x-applier-kubeconfig", func(name string) client.Object {
			return release(withPlane, "s-"+name, false, "other-applier-kubeconfig")
		}},
		{"unlabelled, namespace without a plane", func(name string) client.Object { return release(without, "n-"+name, false, "") }},
		// Last: the placement controller then works through every placement release
		// created, which would load the cases after it.
		{"placement release", func(name string) client.Object { return release(withPlane, "p-"+name, true, "") }},
		{"application kind placed by the class", func(name string) client.Object {
			hr := release(withPlane, "k-"+name, false, "")
			hr.Labels = map[string]string{"apps.example.com/kind": "notebook"}
			return hr
		}},
	}
	b.ResetTimer()
	for round := range b.N {
		for _, tc := range cases {
			lat := make([]time.Duration, 0, n)
			for i := range n {
				obj := tc.make(fmt.Sprintf("%d-%d", round, i))
				t0 := time.Now()
				if err := c.Create(ctx, obj); err != nil {
					b.Fatalf("%s: %v", tc.name, err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			p50, p99 := lat[n/2], lat[n*99/100]
			b.Logf("%-40s p50 %6.2f ms  p99 %6.2f ms  (%d creates)", tc.name, ms(p50), ms(p99), n)
			b.ReportMetric(ms(p99), "p99-ms/"+slug(tc.name))
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func slug(s string) string {
	out := []rune{}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			out = append(out, r)
		case len(out) > 0 && out[len(out)-1] != '-':
			out = append(out, '-')
		}
	}
	return string(out)
}
