// Package bench measures the operator against real apiservers. Run with `make bench`;
// the figures are recorded in docs/benchmarks.md.
package bench

import (
	"context"

	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/test/testkit"
)

// The operator's logs are dropped unless BENCH_LOGS is set (to look into a figure;
// BENCH_LOGS=debug adds the debug log: each pass's phases and what they took).
// (controller-runtime takes the first logger it is given, and only that one.)
func init() {
	if v := os.Getenv("BENCH_LOGS"); v != "" {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(v == "debug")))
		return
	}
	ctrl.SetLogger(logr.Discard())
}

// requestCounter counts the operator's API requests, writes apart.
type requestCounter struct {
	next          http.RoundTripper
	total, writes atomic.Int64
}

func (c *requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.total.Add(1)
	if r.Method != http.MethodGet {
		c.writes.Add(1)
	}
	return c.next.RoundTrip(r)
}

// BenchmarkReconcileToSettled creates N ComputePlanes (each in its own namespace) and
// measures how long the operator takes until every one reports on its generation, and
// how many API requests it makes per plane.
func BenchmarkReconcileToSettled(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counter := &requestCounter{}
	op := newOperator(b, ctx, func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	op.start(b, ctx)
	mgmt := op.mgmt

	class := &cpv1.ComputePlaneClass{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: cpv1.ComputePlaneClassSpec{
			AllowedNamespaces: &metav1.LabelSelector{},
			KubernetesVersion: "v1.33.4",
			Addons: []cpv1.SystemAddon{{Name: "cilium", Role: cpv1.AddonRoleCNI, TargetNamespace: "kube-system",
				ChartRef: cpv1.AddonChartRef{Kind: "OCIRepository", Name: "cilium"}}},
			NodeGroups: cpv1.NodeGroupLimits{InstanceTypes: []string{"u1.medium"}},
		},
	}
	if err := mgmt.Client.Create(ctx, class); err != nil {
		b.Fatal(err)
	}

	// Warm up: the first plane starts the operator's informers for every kind it
	// applies or reads (a one-time cost per process, not per plane).
	round := 0
	waitSettled(b, ctx, mgmt.Client, createPlanes(b, ctx, mgmt.Client, createNamespaces(b, ctx, mgmt.Client, round, 1)))

	for _, n := range []int{10, 100, 500} {
		b.Run(fmt.Sprintf("planes=%d", n), func(b *testing.B) {
			m := testkit.NewMeans(b)
			defer m.Report()
			for b.Loop() {
				round++
				namespaces := createNamespaces(b, ctx, mgmt.Client, round, n)
				total0, writes0 := counter.total.Load(), counter.writes.Load()
				start := time.Now()
				keys := createPlanes(b, ctx, mgmt.Client, namespaces)
				waitSettled(b, ctx, mgmt.Client, keys)
				elapsed := time.Since(start)
				m.Add("ms/plane", float64(elapsed.Milliseconds())/float64(n))
				m.Add("s/total", elapsed.Seconds())
				m.Add("requests/plane", float64(counter.total.Load()-total0)/float64(n))
				m.Add("writes/plane", float64(counter.writes.Load()-writes0)/float64(n))
			}
		})
	}
	fmt.Fprintln(os.Stderr, "benchmark: planes settle at Provisioned=False/WaitingForInfrastructure (no Cluster API controllers run)")
}

func createNamespaces(b *testing.B, ctx context.Context, c client.Client, round, n int) []string {
	b.Helper()
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("bench-%d-%d", round, i)
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: out[i]}}); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// createPlanes creates one plane per namespace from 8 goroutines, as a burst of tenants
// would; the timer runs from the first create to the last plane settling.
func createPlanes(b *testing.B, ctx context.Context, c client.Client, namespaces []string) []client.ObjectKey {
	b.Helper()
	keys := make([]client.ObjectKey, len(namespaces))
	next := atomic.Int64{}
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(namespaces) {
					return
				}
				p := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: namespaces[i], Name: "plane"},
					Spec: cpv1.ComputePlaneSpec{ClassName: "bench", NodeGroups: map[string]cpv1.NodeGroup{
						"workers": {MinReplicas: 1, MaxReplicas: 3, InstanceType: "u1.medium"}}}}
				if err := c.Create(ctx, p); err != nil {
					failed.Store(err)
					return
				}
				keys[i] = client.ObjectKeyFromObject(p)
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return keys
}

func waitSettled(b *testing.B, ctx context.Context, c client.Client, keys []client.ObjectKey) {
	b.Helper()
	var list cpv1.ComputePlaneList
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.List(ctx, &list); err != nil {
			return false, err
		}
		want := map[client.ObjectKey]bool{}
		for _, k := range keys {
			want[k] = true
		}
		for _, p := range list.Items {
			if want[client.ObjectKeyFromObject(&p)] && p.Status.ObservedGeneration == p.Generation {
				delete(want, client.ObjectKeyFromObject(&p))
			}
		}
		return len(want) == 0, nil
	})
	if err != nil {
		b.Fatalf("planes did not settle: %v", err)
	}
}
