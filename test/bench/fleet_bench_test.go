package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/devprovider"
	"github.com/cozystack/computeplane/test/operatortest"
)

// planeAdmin is the user the planes' admin kubeconfigs name (the operator, in a plane).
const planeAdmin = "kubernetes-super-admin"

// BenchmarkFleetAtRest brings N planes to Ready with the shipped manager binary (its own
// process, production flags) and measures it at rest: its RSS and Go heap, and the
// requests it makes to the management apiserver and to the planes over a rest window
// (both audited). The dev provider serves the planes from FLEET_SHARED (default 4)
// shared tenant apiservers, each plane through its own endpoint (see
// devprovider.Provider.Shared).
//
// planes=100 runs by default; FLEET_PLANES=100,500 (any list) picks the sizes, and
// FLEET_REST (a duration, default 2m) the rest window. 500 planes take about N minutes:
// run them on purpose, not in every `make bench`:
//
//	FLEET_PLANES=500 go test -run '^$' -bench FleetAtRest -benchtime 1x -timeout 60m ./test/bench/
func BenchmarkFleetAtRest(b *testing.B) {
	sizes := []int{100}
	if s := os.Getenv("FLEET_PLANES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("FLEET_PLANES=%q: want a list of plane counts", s)
			}
			sizes = append(sizes, n)
		}
	}
	rest := 2 * time.Minute
	if s := os.Getenv("FLEET_REST"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		rest = d
	}
	shared := 4
	if s := os.Getenv("FLEET_SHARED"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("FLEET_SHARED=%q", s)
		}
		shared = n
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("planes=%d", n), func(b *testing.B) { fleetAtRest(b, n, min(shared, n), rest) })
	}
}

func fleetAtRest(b *testing.B, n, shared int, rest time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scheme := controllers.NewScheme()
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme, Audit: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = mgmt.Stop() })
	provider, stopProvider, err := devprovider.StartWith(ctx, mgmt.Config, scheme, devprovider.Options{
		Shared: shared, Tenant: devenv.TenantOptions{Audit: true}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stopProvider)
	// Production flags: the defaults of cmd/manager (4 workers, 30 s requeue, 10 s plane
	// timeout and probe interval, 30 s grace, 1 h applier tokens), with leader election.
	// With FLEET_PROFILE_DIR, the profiling endpoints, on loopback, for a heap profile at
	// the end; without, none, as in production (the manager then keeps no allocation
	// profile, which is part of its memory).
	var args []string
	var pprofAddr string
	if os.Getenv("FLEET_PROFILE_DIR") != "" {
		if pprofAddr, err = devenv.FreeAddr(); err != nil {
			b.Fatal(err)
		}
		args = append(args, "--pprof-bind-address="+pprofAddr)
	}
	// FLEET_MANAGER_ARGS adds flags (space-separated), e.g. --leader-elect=false when the
	// machine is so loaded that the lease cannot be renewed within its 5 s timeout.
	args = append(args, strings.Fields(os.Getenv("FLEET_MANAGER_ARGS"))...)
	// FLEET_MANAGER_ENV adds to the manager's environment (space-separated), e.g.
	// GOMEMLIMIT=691MiB, what the shipped 768Mi limit sets.
	// FLEET_MEMORY_LIMIT (a quantity: 150Mi) runs the manager in a memory cgroup with
	// that limit, as a container's: its binary's pages then count, and are reclaimed
	// under the limit (the manager sets GOMEMLIMIT from it, as in a pod).
	var limit int64
	if s := os.Getenv("FLEET_MEMORY_LIMIT"); s != "" {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			b.Fatalf("FLEET_MEMORY_LIMIT=%q: %v", s, err)
		}
		limit = q.Value()
	}
	proc, err := operatortest.StartProcess(ctx, mgmt, operatortest.ProcessOptions{Args: args,
		Env: strings.Fields(os.Getenv("FLEET_MANAGER_ENV")), MemoryLimit: limit})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(proc.Stop)
	time.Sleep(10 * time.Second)
	idle := sampleMemory(b, proc)
	b.Logf("manager idle, no planes: RSS %.1f MiB (anonymous %.1f), heap in use %.1f MiB", mib(idle.rss), mib(idle.rssAnon), mib(idle.heapInuse))

	c := mgmt.Client
	class := &cpv1.ComputePlaneClass{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Spec: cpv1.ComputePlaneClassSpec{
		AllowedNamespaces: &metav1.LabelSelector{},
		KubernetesVersion: "v1.33.4",
		Addons: []cpv1.SystemAddon{{Name: "cilium", Role: cpv1.AddonRoleCNI, TargetNamespace: "kube-system",
			ChartRef: cpv1.AddonChartRef{Kind: "OCIRepository", Name: "cilium"}}},
		PodSecurity: cpv1.PodSecurityProfile{ExemptNamespaces: []string{"kube-system"}},
	}}
	if err := c.Create(ctx, class); err != nil {
		b.Fatal(err)
	}
	// Fixed-width tenant namespaces: planes sharing an apiserver need names of one length.
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				ns := fmt.Sprintf("fleet-%04d", i)
				if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
					errs <- err
					return
				}
				if err := c.Create(ctx, &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plane"},
					Spec: cpv1.ComputePlaneSpec{ClassName: class.Name, PlacementNamespaces: []string{"notebooks"}}}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}

	var peak memory
	lastLog := time.Now()
	deadline := time.Now().Add(15*time.Minute + time.Duration(n)*2*time.Second)
	for {
		ready, reasons := readyCount(ctx, b, mgmt)
		if m := sampleMemory(b, proc); m.rss > peak.rss {
			peak = m
		}
		if ready == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d planes Ready after %s; the others: %v%s", ready, n, time.Since(start).Round(time.Second), reasons, proc.Tail())
		}
		if time.Since(lastLog) > 30*time.Second {
			b.Logf("%s: %d of %d Ready; not Ready: %v", time.Since(start).Round(time.Second), ready, n, reasons)
			lastLog = time.Now()
		}
		time.Sleep(2 * time.Second)
	}
	toReady := time.Since(start)
	b.Logf("%d planes Ready in %s (peak RSS on the way %.1f MiB); settling 45 s", n, toReady.Round(time.Second), mib(peak.rss))
	time.Sleep(45 * time.Second)

	m0, err := proc.Metrics()
	if err != nil {
		b.Fatal(err)
	}
	var cg0 operatortest.MemoryCgroupStats
	if limit > 0 {
		if cg0, err = proc.MemoryCgroup(); err != nil {
			b.Fatal(err)
		}
	}
	if pprofAddr != "" {
		// What the fleet at rest allocates: compare with the profile saved at the end
		// (go tool pprof -base fleet-allocs-start-N.pb.gz fleet-allocs-N.pb.gz).
		if _, err := saveProfile(pprofAddr, "allocs", "allocs-start", n); err != nil {
			b.Logf("no allocation profile: %v", err)
		}
	}
	cpuProfile := make(chan string, 1)
	if pprofAddr != "" {
		// Where the rest window's CPU goes: a profile over all of it but its last 15 s.
		go func() {
			secs := int(max(rest-15*time.Second, 10*time.Second) / time.Second)
			path, err := saveProfile(pprofAddr, fmt.Sprintf("profile?seconds=%d", secs), "cpu", n)
			if err != nil {
				path = "none: " + err.Error()
			}
			cpuProfile <- path
		}()
	}
	t0 := time.Now()
	var samples []memory
	for time.Since(t0) < rest {
		time.Sleep(min(10*time.Second, rest-time.Since(t0)))
		samples = append(samples, sampleMemory(b, proc))
	}
	t1 := time.Now()
	m1, err := proc.Metrics()
	if err != nil {
		b.Fatal(err)
	}
	if pprofAddr != "" {
		b.Logf("CPU profile at rest: %s (go tool pprof -top -cum)", <-cpuProfile)
	}
	if pprofAddr == "" {
		b.Logf("no heap profile (FLEET_PROFILE_DIR unset)")
	} else if profile, err := saveHeapProfile(pprofAddr, n); err != nil {
		b.Logf("no heap profile: %v", err)
	} else {
		b.Logf("heap profile at rest: %s (go tool pprof -top -sample_index=inuse_space %s)", profile, profile)
	}
	if ready, reasons := readyCount(ctx, b, mgmt); ready != n {
		b.Errorf("%d of %d planes Ready at the end of the rest window: %v", ready, n, reasons)
	}

	var maxM, last memory
	for _, s := range samples {
		maxM.rss, maxM.heapInuse, maxM.heapAlloc = max(maxM.rss, s.rss), max(maxM.heapInuse, s.heapInuse), max(maxM.heapAlloc, s.heapAlloc)
		maxM.rssAnon = max(maxM.rssAnon, s.rssAnon)
		maxM.sys, maxM.stacks, maxM.goroutines = max(maxM.sys, s.sys), max(maxM.stacks, s.stacks), max(maxM.goroutines, s.goroutines)
	}
	last = samples[len(samples)-1]
	minutes := t1.Sub(t0).Minutes()

	mgmtReqs, err := restRequests([]string{mgmt.AuditLog}, devenv.OperatorUser, t0, t1)
	if err != nil {
		b.Fatal(err)
	}
	var logs []string
	for _, t := range provider.SharedTenants() {
		logs = append(logs, t.AuditLog)
	}
	planeReqs, err := restRequests(logs, planeAdmin, t0, t1)
	if err != nil {
		b.Fatal(err)
	}
	// A fleet at rest writes nothing but leader election's Lease (and the final count
	// of an event series from the bring-up: client-go writes it 6 to 12 minutes after
	// the series' last event): a write here is an object the operator found different
	// from what it wants on every pass (a scoped cache that cannot answer a read makes
	// its object look missing).
	if mgmtReqs.objectWrites > 0 || planeReqs.writes > 0 {
		b.Errorf("the operator wrote at rest: %d times to the management apiserver (Leases and Events aside), %d times to the planes", mgmtReqs.objectWrites, planeReqs.writes)
	}
	// Nor does it read anything but through its watches: every object it depends on is
	// watched (Secrets by their metadata, in the namespaces it is bound in).
	if len(mgmtReqs.beyondWatches) > 0 {
		b.Errorf("the operator made management requests at rest besides watches (leader election and events aside): %v", mgmtReqs.beyondWatches)
	}
	drifts := m1["computeplane_drift_repairs_total"]
	restDrifts := drifts - m0["computeplane_drift_repairs_total"]

	b.ReportMetric(mib(maxM.rss), "MiB-RSS")
	b.ReportMetric(mib(maxM.heapInuse), "MiB-heap-inuse")
	b.ReportMetric(mib(maxM.heapAlloc), "MiB-heap-alloc")
	b.ReportMetric(toReady.Seconds(), "s-to-all-Ready")
	b.ReportMetric(float64(mgmtReqs.total)/minutes, "mgmt-req/min")
	b.ReportMetric(float64(planeReqs.total)/minutes/float64(n), "plane-req/min/plane")
	b.ReportMetric(float64(planeReqs.writes), "plane-writes-at-rest")
	b.ReportMetric(restDrifts, "drifts-at-rest")
	reconciles := m1["controller_runtime_reconcile_total"] - m0["controller_runtime_reconcile_total"]
	b.ReportMetric(reconciles/minutes/float64(n), "reconciles/min/plane")
	fmt.Fprintf(os.Stderr, "planes=%d: %d shared tenant apiservers; rest window %s\n", n, shared, t1.Sub(t0).Round(time.Second))
	fmt.Fprintf(os.Stderr, "planes=%d: memory over the rest window (max / last): RSS %.1f / %.1f MiB, heap in use %.1f / %.1f MiB, heap alloc %.1f / %.1f MiB, Go sys %.1f MiB; idle before any plane: RSS %.1f MiB\n", n,
		mib(maxM.rss), mib(last.rss), mib(maxM.heapInuse), mib(last.heapInuse), mib(maxM.heapAlloc), mib(last.heapAlloc), mib(maxM.sys), mib(idle.rss))
	fmt.Fprintf(os.Stderr, "planes=%d: anonymous RSS (RSS less the binary's pages) max %.1f MiB, idle %.1f MiB\n", n, mib(maxM.rssAnon), mib(idle.rssAnon))
	fmt.Fprintf(os.Stderr, "planes=%d: goroutines %.0f (idle %.0f), their stacks %.1f MiB (idle %.1f MiB)\n", n, maxM.goroutines, idle.goroutines, mib(maxM.stacks), mib(idle.stacks))
	// Where the anonymous memory goes, by the runtime's account (the last sample): what
	// is not heap in use or stacks is the runtime's own metadata and free heap pages it
	// has not given back yet.
	fmt.Fprintf(os.Stderr, "planes=%d: the runtime's account at the end: heap in use %.1f MiB, stacks %.1f, span metadata %.1f, GC metadata %.1f, profiling buckets %.1f, other %.1f, free heap not returned %.1f\n", n,
		mib(m1["go_memstats_heap_inuse_bytes"]), mib(m1["go_memstats_stack_inuse_bytes"]), mib(m1["go_memstats_mspan_inuse_bytes"]+m1["go_memstats_mcache_inuse_bytes"]),
		mib(m1["go_memstats_gc_sys_bytes"]), mib(m1["go_memstats_buck_hash_sys_bytes"]), mib(m1["go_memstats_other_sys_bytes"]),
		mib(m1["go_memstats_heap_idle_bytes"]-m1["go_memstats_heap_released_bytes"]))
	if limit > 0 {
		cg, err := proc.MemoryCgroup()
		if err != nil {
			b.Fatal(err)
		}
		if cg.OOMKills > 0 || proc.Runs() > 1 {
			b.Errorf("the manager was killed at its %s limit (%d OOM kills, %d runs)", os.Getenv("FLEET_MEMORY_LIMIT"), cg.OOMKills, proc.Runs())
		}
		b.ReportMetric(mib(float64(cg.MaxUsage)), "MiB-cgroup-peak")
		fmt.Fprintf(os.Stderr, "planes=%d: in a memory cgroup limited to %.0f MiB: usage %.1f MiB (peak over the whole run %.1f), anonymous %.1f, files %.1f (mapped %.1f); file pages read from disk at rest %.1f MiB/min; OOM kills %d\n", n,
			mib(float64(limit)), mib(float64(cg.Usage)), mib(float64(cg.MaxUsage)), mib(float64(cg.Anon)), mib(float64(cg.File)), mib(float64(cg.MappedFile)),
			mib(float64((cg.FileRefaults-cg0.FileRefaults)*int64(os.Getpagesize())))/minutes, cg.OOMKills)
	}
	fmt.Fprintf(os.Stderr, "planes=%d: drift repairs: %.0f over the whole run, %.0f at rest\n", n, drifts, restDrifts)
	// What the collector costs at rest (GOGC trades it for memory).
	if _, ok := m1["process_cpu_seconds_total"]; ok {
		cpu := m1["process_cpu_seconds_total"] - m0["process_cpu_seconds_total"]
		b.ReportMetric(100*cpu/t1.Sub(t0).Seconds(), "cpu-%-at-rest")
		fmt.Fprintf(os.Stderr, "planes=%d: CPU at rest %.1f %% of one core; %.1f collections a minute\n", n,
			100*cpu/t1.Sub(t0).Seconds(), (m1["go_gc_duration_seconds_count"]-m0["go_gc_duration_seconds_count"])/minutes)
	}
	fullReads := m1["computeplane_plane_full_reads_total"] - m0["computeplane_plane_full_reads_total"]
	b.ReportMetric(fullReads/minutes/float64(n), "full-reads/min/plane")
	fmt.Fprintf(os.Stderr, "planes=%d: full reads of a plane at rest: %.0f (%.2f/min per plane)\n", n, fullReads, fullReads/minutes/float64(n))
	fmt.Fprint(os.Stderr, counterMoves(m0, m1, "computeplane_plane_full_reads_total"))
	fmt.Fprintf(os.Stderr, "planes=%d: what the planes' watches saw at rest:\n%s", n, counterMoves(m0, m1, "computeplane_plane_watch_events_total"))
	// The breakdowns go to stderr: a benchmark's log is cut after a few lines.
	fmt.Fprintf(os.Stderr, "planes=%d: management apiserver, operator's requests at rest: %.1f/min (%d, of which %d writes)\n%s", n,
		float64(mgmtReqs.total)/minutes, mgmtReqs.total, mgmtReqs.writes, mgmtReqs.breakdown(minutes, 1))
	fmt.Fprintf(os.Stderr, "planes=%d: planes, operator's requests at rest: %.2f/min per plane (%d in all, of which %d writes)\n%s", n,
		float64(planeReqs.total)/minutes/float64(n), planeReqs.total, planeReqs.writes, planeReqs.breakdown(minutes, n))
	fmt.Fprintf(os.Stderr, "planes=%d: the management cluster's objects of the kinds the manager caches:\n%s", n, objectWeights(ctx, mgmt.Client))
}

// counterMoves lists, one per line, how much each labelled series of a counter moved
// between two scrapes.
func counterMoves(m0, m1 map[string]float64, name string) string {
	var out []string
	for k, v := range m1 {
		if strings.HasPrefix(k, name+"{") && v > m0[k] {
			out = append(out, fmt.Sprintf("  %-70s %6.0f\n", strings.TrimPrefix(k, name), v-m0[k]))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "")
}

// saveHeapProfile saves the manager's heap profile in FLEET_PROFILE_DIR and returns its
// path; its goroutine profile goes beside it
// (fleet-goroutine-N.pb.gz).
func saveHeapProfile(addr string, n int) (string, error) {
	for _, p := range []string{"goroutine", "allocs"} {
		if _, err := saveProfile(addr, p, p, n); err != nil {
			return "", err
		}
	}
	return saveProfile(addr, "heap", "heap", n)
}

func saveProfile(addr, profile, name string, n int) (string, error) {
	resp, err := http.Get("http://" + addr + "/debug/pprof/" + profile)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /debug/pprof/%s: %s", profile, resp.Status)
	}
	f, err := os.Create(filepath.Join(os.Getenv("FLEET_PROFILE_DIR"), fmt.Sprintf("fleet-%s-%d.pb.gz", name, n)))
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return f.Name(), err
}

type memory struct{ rss, rssAnon, heapInuse, heapAlloc, sys, stacks, goroutines float64 }

func sampleMemory(b *testing.B, p *operatortest.Process) memory {
	b.Helper()
	rss, err := p.RSS()
	if err != nil {
		b.Fatal(err)
	}
	anon, err := p.RSSAnon()
	if err != nil {
		b.Fatal(err)
	}
	m, err := p.Metrics()
	if err != nil {
		b.Fatal(err)
	}
	return memory{rss: float64(rss), rssAnon: float64(anon), heapInuse: m["go_memstats_heap_inuse_bytes"], heapAlloc: m["go_memstats_heap_alloc_bytes"],
		sys: m["go_memstats_sys_bytes"], stacks: m["go_memstats_stack_inuse_bytes"], goroutines: m["go_goroutines"]}
}

func mib(v float64) float64 { return v / (1 << 20) }

// readyCount counts the Ready planes and tallies the reasons of the others.
func readyCount(ctx context.Context, b *testing.B, mgmt *devenv.Cluster) (int, map[string]int) {
	b.Helper()
	var list cpv1.ComputePlaneList
	if err := mgmt.Client.List(ctx, &list); err != nil {
		b.Fatal(err)
	}
	ready, reasons := 0, map[string]int{}
	for _, p := range list.Items {
		if apimeta.IsStatusConditionTrue(p.Status.Conditions, cpv1.ReadyCondition) {
			ready++
			continue
		}
		reason := "no Ready condition"
		if c := apimeta.FindStatusCondition(p.Status.Conditions, cpv1.ReadyCondition); c != nil {
			reason = c.Reason
		}
		reasons[reason]++
	}
	return ready, reasons
}

// requestTally counts audited requests by verb and resource: completed requests, and
// watches when they are opened (a watch's response starts when it opens and completes
// when it ends).
type requestTally struct {
	total, writes int
	// objectWrites leaves out leader election's Lease renewals and Events.
	objectWrites int
	// beyondWatches counts what is neither a watch, nor leader election's Lease, nor an
	// Event, by verb and resource.
	beyondWatches map[string]int
	by            map[string]int
}

func restRequests(logs []string, user string, t0, t1 time.Time) (*requestTally, error) {
	t := &requestTally{by: map[string]int{}, beyondWatches: map[string]int{}}
	for _, path := range logs {
		events, err := devenv.ReadAudit(path)
		if err != nil {
			return nil, err
		}
		for _, ev := range events {
			if ev.User.Username != user || ev.RequestReceived.Before(t0) || !ev.RequestReceived.Before(t1) {
				continue
			}
			if ev.Verb == "watch" {
				if ev.Stage != "ResponseStarted" {
					continue
				}
			} else if ev.Stage != "ResponseComplete" {
				continue
			}
			what := "(non-resource)"
			if r := ev.ObjectRef; r != nil {
				g := r.APIGroup
				if g == "" {
					g = "core"
				}
				what = g + "/" + r.Resource
				if r.Subresource != "" {
					what += "/" + r.Subresource
				}
			}
			if ev.ImpersonatedUser != nil {
				what += " as " + ev.ImpersonatedUser.Username
			}
			t.by[ev.Verb+" "+what]++
			t.total++
			if ev.Verb != "watch" && (ev.ObjectRef == nil || (ev.ObjectRef.APIGroup != "coordination.k8s.io" && ev.ObjectRef.APIGroup != "events.k8s.io")) {
				t.beyondWatches[ev.Verb+" "+what]++
			}
			if ev.Mutating() {
				t.writes++
				if ev.ObjectRef == nil || (ev.ObjectRef.APIGroup != "coordination.k8s.io" && ev.ObjectRef.APIGroup != "events.k8s.io") {
					t.objectWrites++
				}
			}
		}
	}
	return t, nil
}

func (t *requestTally) breakdown(minutes float64, per int) string {
	keys := make([]string, 0, len(t.by))
	for k := range t.by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return t.by[keys[i]] > t.by[keys[j]] || t.by[keys[i]] == t.by[keys[j]] && keys[i] < keys[j]
	})
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "  %-70s %6d  %8.2f/min\n", k, t.by[k], float64(t.by[k])/minutes/float64(per))
	}
	return sb.String()
}
