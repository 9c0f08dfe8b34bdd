// Package sharding proves that ComputePlanes split across managers the way Flux's
// objects do (the sharding.fluxcd.io/key label and --watch-label-selector): two managers
// on one management apiserver, each plane reconciled by exactly one, and a plane moved
// between shards handed over.
package sharding

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/tenancy"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fluxcd/pkg/apis/meta"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/operatortest"
	"github.com/cozystack/computeplane/test/testkit"
)

// statusWrites counts one manager's writes to each plane's status.
type statusWrites struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int // namespace/name
}

func (w *statusWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	// .../namespaces/<ns>/computeplanes/<name>/status
	if parts := strings.Split(req.URL.Path, "/"); req.Method != http.MethodGet && len(parts) >= 4 &&
		parts[len(parts)-1] == "status" && parts[len(parts)-3] == "computeplanes" {
		w.mu.Lock()
		w.n[parts[len(parts)-4]+"/"+parts[len(parts)-2]]++
		w.mu.Unlock()
	}
	return w.next.RoundTrip(req)
}

func (w *statusWrites) of(key client.ObjectKey) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[key.String()]
}

func startShard(t *testing.T, ctx context.Context, mgmt *devenv.Cluster, selector string, webhooks bool) *statusWrites {
	t.Helper()
	sel, err := labels.Parse(selector)
	if err != nil {
		t.Fatal(err)
	}
	w := &statusWrites{n: map[string]int{}}
	op, err := operatortest.Start(ctx, mgmt, operatortest.Options{
		Options: controllers.Options{
			Setup:           controllers.SetupOptions{Options: controller.Options{MaxConcurrentReconciles: 2}, ReconcileRequests: true},
			RequeueInterval: 2 * time.Second, PlaneTimeout: 2 * time.Second, PlaneUnreachableGrace: time.Second,
			Webhooks: webhooks,
			Shard:    tenancy.Shard{Selector: sel},
		},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper { w.next = rt; return w },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Stop() })
	return w
}

func TestEachPlaneHasOneShard(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	if testing.Verbose() && os.Getenv("SHARDING_LOGS") != "" {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: controllers.NewScheme(), Webhooks: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgmt.Stop() })
	k8s := mgmt.Client

	// The main instance takes every plane without a shard key; shard1 those labelled so.
	main := startShard(t, ctx, mgmt, "!"+cpv1.ShardKeyLabel, true)
	shard1 := startShard(t, ctx, mgmt, cpv1.ShardKeyLabel+" in (shard1)", false)

	class := &cpv1.ComputePlaneClass{ObjectMeta: metav1.ObjectMeta{Name: "sharded"}, Spec: cpv1.ComputePlaneClassSpec{
		AllowedNamespaces: &metav1.LabelSelector{},
		KubernetesVersion: "v1.33.4",
		Addons: []cpv1.SystemAddon{{Name: "cilium", Role: cpv1.AddonRoleCNI, TargetNamespace: "kube-system",
			ChartRef: cpv1.AddonChartRef{Kind: "OCIRepository", Name: "cilium"}}},
		PodSecurity: cpv1.PodSecurityProfile{ExemptNamespaces: []string{"kube-system"}},
	}}
	if err := k8s.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	newPlane := func(shard string) *cpv1.ComputePlane {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-" + rand.String(6)}}
		if err := k8s.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		p := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "plane"},
			Spec: cpv1.ComputePlaneSpec{ClassName: class.Name}}
		if shard != "" {
			p.Labels = map[string]string{cpv1.ShardKeyLabel: shard}
		}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unsharded, sharded := newPlane(""), newPlane("shard1")
	handled := func(p *cpv1.ComputePlane, stamp string) func() error {
		return func() error {
			got := &cpv1.ComputePlane{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
				return err
			}
			if got.Status.LastHandledReconcileAt != stamp {
				return fmt.Errorf("%s: lastHandledReconcileAt = %q, want %q", p.Namespace, got.Status.LastHandledReconcileAt, stamp)
			}
			return nil
		}
	}
	request := func(p *cpv1.ComputePlane, stamp string) {
		t.Helper()
		patch := client.MergeFrom(p.DeepCopy())
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[meta.ReconcileRequestAnnotation] = stamp
		if err := k8s.Patch(ctx, p, patch); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*cpv1.ComputePlane{unsharded, sharded} {
		request(p, "first")
		testkit.Eventually(t, time.Minute, handled(p, "first"))
	}
	// writesBetween reports each manager's status writes to p while f runs.
	writesBetween := func(p *cpv1.ComputePlane, f func()) (byMain, byShard1 int) {
		key := client.ObjectKeyFromObject(p)
		m0, s0 := main.of(key), shard1.of(key)
		f()
		time.Sleep(3 * time.Second) // a requeue interval and then some: a second writer would show
		return main.of(key) - m0, shard1.of(key) - s0
	}
	check := func(what string, p *cpv1.ComputePlane, stamp string, wantMain bool) {
		t.Helper()
		m, s := writesBetween(p, func() {
			request(p, stamp)
			testkit.Eventually(t, time.Minute, handled(p, stamp))
		})
		if wantMain && (m == 0 || s != 0) || !wantMain && (s == 0 || m != 0) {
			t.Errorf("%s: status writes by the main manager %d, by shard1 %d", what, m, s)
		}
	}
	check("a plane without a shard key", unsharded, "second", true)
	check("a plane of shard1", sharded, "second", false)
	if main.of(client.ObjectKeyFromObject(sharded)) != 0 || shard1.of(client.ObjectKeyFromObject(unsharded)) != 0 {
		t.Errorf("a manager wrote the status of another shard's plane: main→sharded %d, shard1→unsharded %d",
			main.of(client.ObjectKeyFromObject(sharded)), shard1.of(client.ObjectKeyFromObject(unsharded)))
	}

	// Moving the plane to shard1 hands it over: from then on shard1 alone reconciles it.
	patch := client.MergeFrom(unsharded.DeepCopy())
	unsharded.Labels = map[string]string{cpv1.ShardKeyLabel: "shard1"}
	if err := k8s.Patch(ctx, unsharded, patch); err != nil {
		t.Fatal(err)
	}
	request(unsharded, "moved")
	testkit.Eventually(t, time.Minute, handled(unsharded, "moved"))
	check("a plane moved to shard1", unsharded, "after-move", false)
}
