package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/test/testkit"
)

// operatorWrites counts every request of the operator that is not a read.
var operatorWrites atomic.Int64

type writeCounter struct{ next http.RoundTripper }

func (w *writeCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		operatorWrites.Add(1)
	}
	return w.next.RoundTrip(r)
}

// BenchmarkPlacement: N placement releases are created while their plane waits for its
// class (held), then the class appears. It reports the time from the plane's Ready to the
// operator reporting all N routed, the operator's writes in that window, and the time
// until the real helm-controller (8 concurrent reconciles) has installed all N into the
// plane.
func BenchmarkPlacement(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("releases=%d", n), func(b *testing.B) {
			m := testkit.NewMeans(b)
			defer m.Report()
			for b.Loop() {
				benchmarkPlacement(b, m, n)
			}
		})
	}
}

func benchmarkPlacement(b *testing.B, m *testkit.Means, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	className := "bench-" + rand.String(6)
	p := newPlane(b, ctx, func(p *cpv1.ComputePlane) { p.Spec.ClassName = className })
	key := client.ObjectKeyFromObject(p)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := k8s.Create(ctx, release(p.Namespace, fmt.Sprintf("app-%d", i), "app", "v1")); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	waitFor(b, ctx, func() bool {
		got := &cpv1.ComputePlane{}
		return k8s.Get(ctx, key, got) == nil && got.Status.Placement != nil && got.Status.Placement.Held == int32(n)
	})

	c := class.DeepCopy()
	c.ObjectMeta = metav1.ObjectMeta{Name: className}
	if err := k8s.Create(ctx, c); err != nil {
		b.Fatal(err)
	}
	var ready time.Time
	var writesAtReady int64
	waitFor(b, ctx, func() bool {
		got := &cpv1.ComputePlane{}
		if k8s.Get(ctx, key, got) != nil || !apimeta.IsStatusConditionTrue(got.Status.Conditions, cpv1.ReadyCondition) {
			return false
		}
		ready, writesAtReady = time.Now(), operatorWrites.Load()
		return true
	})
	waitFor(b, ctx, func() bool {
		got := &cpv1.ComputePlane{}
		return k8s.Get(ctx, key, got) == nil && got.Status.Placement != nil && got.Status.Placement.Routed == int32(n)
	})
	m.Add("ms-Ready-to-all-routed", float64(time.Since(ready).Milliseconds()))
	m.Add("operator-writes-Ready-to-routed", float64(operatorWrites.Load()-writesAtReady))
	waitFor(b, ctx, func() bool {
		var hrs helmv2.HelmReleaseList
		if k8s.List(ctx, &hrs, client.InNamespace(p.Namespace)) != nil {
			return false
		}
		installed := 0
		for _, hr := range hrs.Items {
			if c := apimeta.FindStatusCondition(hr.Status.Conditions, meta.ReadyCondition); c != nil && c.Status == metav1.ConditionTrue {
				installed++
			}
		}
		return installed == n
	})
	m.Add("s-Ready-to-all-installed", time.Since(ready).Seconds())
}

// waitFor polls cond until it holds, within ctx's deadline.
func waitFor(b *testing.B, ctx context.Context, cond func() bool) {
	b.Helper()
	deadline, _ := ctx.Deadline()
	eventually(b, time.Until(deadline), func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	})
}

// BenchmarkTeardown: a Ready plane with N placement releases installed by the real
// helm-controller is deleted. It reports the time until every release is uninstalled
// from the plane (the teardown's first stage) and until the plane is gone (no Cluster
// API runs here, so the Cluster goes at once).
func BenchmarkTeardown(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("releases=%d", n), func(b *testing.B) {
			m := testkit.NewMeans(b)
			defer m.Report()
			for b.Loop() {
				benchmarkTeardown(b, m, n)
			}
		})
	}
}

func benchmarkTeardown(b *testing.B, m *testkit.Means, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	p := newPlane(b, ctx)
	key := client.ObjectKeyFromObject(p)
	waitFor(b, ctx, func() bool {
		got := &cpv1.ComputePlane{}
		return k8s.Get(ctx, key, got) == nil && apimeta.IsStatusConditionTrue(got.Status.Conditions, cpv1.ReadyCondition)
	})
	for i := range n {
		if err := k8s.Create(ctx, release(p.Namespace, fmt.Sprintf("app-%d", i), "app", "v1")); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, ctx, func() bool {
		var hrs helmv2.HelmReleaseList
		if k8s.List(ctx, &hrs, client.InNamespace(p.Namespace)) != nil {
			return false
		}
		ready := 0
		for _, hr := range hrs.Items {
			if c := apimeta.FindStatusCondition(hr.Status.Conditions, meta.ReadyCondition); c != nil && c.Status == metav1.ConditionTrue {
				ready++
			}
		}
		return ready == n
	})
	start := time.Now()
	deleteWithReleases(b, ctx, p)
	waitFor(b, ctx, func() bool {
		var hrs helmv2.HelmReleaseList
		return k8s.List(ctx, &hrs, client.InNamespace(p.Namespace)) == nil && len(hrs.Items) == 0
	})
	m.Add("s-delete-to-all-uninstalled", time.Since(start).Seconds())
	waitFor(b, ctx, func() bool { return apierrors.IsNotFound(k8s.Get(ctx, key, &cpv1.ComputePlane{})) })
	m.Add("s-delete-to-plane-gone", time.Since(start).Seconds())
}
