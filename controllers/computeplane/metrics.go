package computeplane

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/tenancy"
	"github.com/cozystack/computeplane/remote"
)

// The secure metrics endpoint asks the API server who a scraper is and whether it may
// get /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Metrics the operator records as things happen (stage times, drift repairs, credential
// issues and revocations). What can be read off objects at any time (planes by
// condition, releases, grants, connections) is collected at scrape time instead, so a
// gauge never outlives its plane and a restarted operator reports the truth at once.
var (
	stageDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "computeplane_stage_duration_seconds",
		Help: "Time a plane's lifecycle stage took to become True: from when the stage could start (the stage before it became True, or the stage itself went False, e.g. on drift) until it was verified. Label stage is the condition type.",
		// 100 ms to ~55 min: a drift repair is sub-second, a first provisioning minutes.
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 16),
	}, []string{"stage"})
	provisionedToReady = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "computeplane_provisioned_to_ready_seconds",
		Help:    "Time from the providers reporting a plane's cluster up (Provisioned=True) to the plane being Ready (hardened, identities issued): the operator's own share of bringing a plane up.",
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 14),
	})
	teardownStageDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "computeplane_teardown_stage_duration_seconds",
		Help:    "Time a plane's teardown waited on each stage (label stage is the Reconciling reason while deleting).",
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 16),
	}, []string{"stage"})
	driftRepairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computeplane_drift_repairs_total",
		Help: "Drift found on a verified plane and restored, by the stage owning what drifted (PodSecurityEnforced, AdmissionPoliciesReady, EgressHardened, NetworkPoliciesReady, IdentitiesReady, Provisioned).",
	}, []string{"stage"})
	planeFullReads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computeplane_plane_full_reads_total",
		Help: "Full reads of a plane's posture and identities (what the operator keeps there), by why the pass could not settle for the storage probe: Changed (its watches reported something), NotVerified (a drift or a revocation), RequestFailed, ProbeFailed, Failing, WatchesStopped, NotWatched, NeverRead, SpecClassOrCredentialChanged, ResyncDue (--plane-resync-interval), NotReady, Requested (a reconcile request), Disabled (--plane-resync-interval=0).",
	}, []string{"reason"})
	planeWatchEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computeplane_plane_watch_events_total",
		Help: "What the planes' watches saw, by resource and event: LISTED (a watch listed its kind: at the start, and after a failed watch or a version too old; what happened meanwhile is read in full), ADDED, MODIFIED, DELETED. Each but the first list wakes the plane's reconcile (computeplane_plane_full_reads_total{reason=\"Changed\"}).",
	}, []string{"resource", "event"})
	credentialsIssued = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "computeplane_applier_credentials_issued_total",
		Help: "Applier kubeconfigs issued (a gate opening, or a token renewed after two thirds of its lifetime).",
	})
	credentialsRevoked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "computeplane_applier_credentials_revoked_total",
		Help: "Applier credentials revoked, by why: GateClosed (a stage stopped being True) or Teardown.",
	}, []string{"reason"})
)

// CountPlaneWatchEvent counts what a plane's watch saw (remote.ClusterCache.OnWatchEvent).
func CountPlaneWatchEvent(resource, event string) {
	planeWatchEvents.WithLabelValues(resource, event).Inc()
}

func init() {
	metrics.Registry.MustRegister(stageDuration, provisionedToReady, teardownStageDuration,
		driftRepairs, planeFullReads, planeWatchEvents, credentialsIssued, credentialsRevoked, fleet)
}

// fleet collects the state gauges at scrape time from the manager whose reconciler was
// last set up (tests run several managers in one process, one after another).
var fleet = &stateCollector{}

// use points the state gauges at a manager's cache and plane connections.
func (c *stateCollector) use(reader client.Reader, planes *remote.ClusterCache, shard tenancy.Shard) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reader, c.planes, c.shard = reader, planes, shard
}

var (
	planesDesc = prometheus.NewDesc("computeplane_planes",
		"ComputePlanes by condition type, status and reason (every condition of every plane counts once).",
		[]string{"type", "status", "reason"}, nil)
	releasesDesc = prometheus.NewDesc("computeplane_placement_releases",
		"Placement HelmReleases by state (held: gate closed; routed: applied into the plane; refused; uninstalling), summed over planes.",
		[]string{"state"}, nil)
	grantsDesc = prometheus.NewDesc("computeplane_service_grants",
		"Entries of spec.serviceAccess by state (Granted, Pending, Refused), summed over planes.",
		[]string{"state"}, nil)
	connectionDesc = prometheus.NewDesc("computeplane_plane_connection_up",
		"1 when the operator's last probe of a plane's API server (a quorum read) succeeded, 0 while it fails.",
		[]string{"namespace", "name"}, nil)
)

type stateCollector struct {
	mu     sync.Mutex
	reader client.Reader
	planes *remote.ClusterCache
	// shard: only its planes count, so the gauges of all shards add up to the fleet.
	shard tenancy.Shard
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{planesDesc, releasesDesc, grantsDesc, connectionDesc} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader, planes, shard := c.reader, c.planes, c.shard
	c.mu.Unlock()
	if reader == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := &cpv1.ComputePlaneList{}
	if err := reader.List(ctx, list); err == nil {
		mine := list.Items[:0]
		for i := range list.Items {
			if shard.Holds(&list.Items[i]) {
				mine = append(mine, list.Items[i])
			}
		}
		s := summarizeFleet(mine)
		for k, n := range s.conditions {
			ch <- prometheus.MustNewConstMetric(planesDesc, prometheus.GaugeValue, float64(n), k.Type, k.Status, k.Reason)
		}
		for state, n := range s.releases {
			ch <- prometheus.MustNewConstMetric(releasesDesc, prometheus.GaugeValue, float64(n), state)
		}
		for state, n := range s.grants {
			ch <- prometheus.MustNewConstMetric(grantsDesc, prometheus.GaugeValue, float64(n), state)
		}
	}
	for _, conn := range planes.Connections() {
		up := 0.0
		if conn.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(connectionDesc, prometheus.GaugeValue, up, conn.Key.Namespace, conn.Key.Name)
	}
}

type conditionKey struct{ Type, Status, Reason string }

type fleetSummary struct {
	conditions map[conditionKey]int
	releases   map[string]int32
	grants     map[string]int
}

// summarizeFleet counts what the state gauges report. Every release and grant state is
// present (as 0 when none), so an alert on a rate or an absence has a series to read.
func summarizeFleet(planes []cpv1.ComputePlane) fleetSummary {
	s := fleetSummary{
		conditions: map[conditionKey]int{},
		releases:   map[string]int32{"held": 0, "routed": 0, "refused": 0, "uninstalling": 0},
		grants:     map[string]int{string(cpv1.GrantGranted): 0, string(cpv1.GrantPending): 0, string(cpv1.GrantRefused): 0},
	}
	for i := range planes {
		st := &planes[i].Status
		for _, c := range st.Conditions {
			s.conditions[conditionKey{c.Type, string(c.Status), c.Reason}]++
		}
		if st.Placement != nil {
			s.releases["held"] += st.Placement.Held
			s.releases["routed"] += st.Placement.Routed
			s.releases["refused"] += st.Placement.Refused
			s.releases["uninstalling"] += st.Placement.Uninstalling
		}
		for _, g := range st.ServiceAccess {
			s.grants[string(g.State)]++
		}
	}
	return s
}

// stageTimes returns, for each gating stage that became True between before and after,
// how long it took: from the later of when it last went non-True (or the plane's
// creation) and when the stage before it became True, until now. A stage blocked behind
// an earlier one is not charged for the wait.
func stageTimes(before, after []metav1.Condition, created, now time.Time) map[string]time.Duration {
	out := map[string]time.Duration{}
	readyFrom := created
	for _, t := range cpv1.GatingConditions {
		prev := apimeta.FindStatusCondition(before, t)
		cur := apimeta.FindStatusCondition(after, t)
		if cur == nil || cur.Status != metav1.ConditionTrue {
			break
		}
		if prev == nil || prev.Status != metav1.ConditionTrue {
			start := created
			if prev != nil && prev.LastTransitionTime.After(start) {
				start = prev.LastTransitionTime.Time
			}
			if readyFrom.After(start) {
				start = readyFrom
			}
			out[t] = now.Sub(start)
			readyFrom = now
			continue
		}
		readyFrom = cur.LastTransitionTime.Time
	}
	return out
}

// provisionedReadyTime returns how long the plane took from Provisioned=True to Ready,
// when Ready became True now and Provisioned became True while it was not Ready (a
// drift repair on a long-provisioned plane is not a bring-up).
func provisionedReadyTime(before, after []metav1.Condition, now time.Time) (time.Duration, bool) {
	if apimeta.IsStatusConditionTrue(before, cpv1.ReadyCondition) || !apimeta.IsStatusConditionTrue(after, cpv1.ReadyCondition) {
		return 0, false
	}
	prov := apimeta.FindStatusCondition(after, cpv1.ProvisionedCondition)
	if prov == nil || prov.Status != metav1.ConditionTrue {
		return 0, false
	}
	if wasReady := apimeta.FindStatusCondition(before, cpv1.ReadyCondition); wasReady != nil && prov.LastTransitionTime.Before(&wasReady.LastTransitionTime) {
		return 0, false
	}
	return now.Sub(prov.LastTransitionTime.Time), true
}

// observeTransitions records the histograms of a status that was just written.
func observeTransitions(p *cpv1.ComputePlane, before *cpv1.ComputePlaneStatus, now time.Time) {
	for stage, d := range stageTimes(before.Conditions, p.Status.Conditions, p.CreationTimestamp.Time, now) {
		stageDuration.WithLabelValues(stage).Observe(d.Seconds())
	}
	if d, ok := provisionedReadyTime(before.Conditions, p.Status.Conditions, now); ok {
		provisionedToReady.Observe(d.Seconds())
	}
	if old := before.Deletion; old != nil && (p.Status.Deletion == nil || p.Status.Deletion.Stage != old.Stage) {
		teardownStageDuration.WithLabelValues(old.Stage).Observe(now.Sub(old.Since.Time).Seconds())
	}
}
