package controllers_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// scraper reads the manager's /metrics as Prometheus would: over HTTPS, with a
// ServiceAccount token.
type scraper struct {
	token string
	http  *http.Client
}

// newScraper creates a ServiceAccount and, when bind is set, binds it to the shipped
// computeplane-metrics-reader ClusterRole, as an installation binds Prometheus.
func newScraper(t *testing.T, ctx context.Context, bind bool) *scraper {
	t.Helper()
	ns := tenantNamespace(t, ctx)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prometheus"}}
	if err := k8s.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if bind {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "scrape-" + ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "computeplane-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
		}
		if err := k8s.Create(ctx, crb); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), crb) })
	}
	cs, err := kubernetes.NewForConfig(mgmt.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &scraper{token: tr.Status.Token, http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The manager's metrics certificate is self-signed when no cert dir is given.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test scraper
	}}}
}

func (s *scraper) get(ctx context.Context) (int, map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+metricsAddr+"/metrics", nil)
	if err != nil {
		return 0, nil, err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	return resp.StatusCode, fams, err
}

// value returns the sample of family name whose labels include want (a histogram's
// count), or 0 when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		}
	}
	return 0
}

// TestMetricsMoveWithThePlane scrapes the manager's metrics endpoint (HTTPS, as shipped)
// while a plane comes up, drifts, loses its API server's datastore and recovers, and
// checks that the stage histograms, the condition gauges, the drift and credential
// counters and the connection gauge move with it. Callers without a token or without
// the metrics-reader role get nothing.
func TestMetricsMoveWithThePlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	anonymous := &scraper{http: newScraper(t, ctx, false).http}
	eventually(t, 10*time.Second, func() error { // the metrics server starts with the manager
		if code, _, err := anonymous.get(ctx); err != nil || code != http.StatusUnauthorized {
			return fmt.Errorf("an anonymous scrape got %d (%v), want 401", code, err)
		}
		return nil
	})
	if code, _, err := (&scraper{token: "forged", http: anonymous.http}).get(ctx); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("a scrape with a token the API server does not know got %d (%v), want 401", code, err)
	}
	if code, _, err := newScraper(t, ctx, false).get(ctx); err != nil || code != http.StatusForbidden {
		t.Fatalf("a scrape by an identity without computeplane-metrics-reader got %d (%v), want 403", code, err)
	}
	prom := newScraper(t, ctx, true)
	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		var fams map[string]*dto.MetricFamily
		eventually(t, 10*time.Second, func() error { // the role binding takes a moment to apply
			code, f, err := prom.get(ctx)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("scrape: HTTP %d", code)
			}
			fams = f
			return err
		})
		return fams
	}

	before := scrape()
	p, tenant := readyPlane(t, ctx, newClass("metrics-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	planeLabels := map[string]string{"namespace": p.Namespace, "name": p.Name}
	// The transitions are observed once the status patch that made Ready True returns,
	// which a reader of the API server can see a moment before.
	ready := scrape()
	eventually(t, 10*time.Second, func() error {
		var stale []string
		for _, stage := range cpv1.GatingConditions {
			if value(ready, "computeplane_stage_duration_seconds", map[string]string{"stage": stage}) <=
				value(before, "computeplane_stage_duration_seconds", map[string]string{"stage": stage}) {
				stale = append(stale, fmt.Sprintf("computeplane_stage_duration_seconds{stage=%q}", stage))
			}
		}
		for _, m := range []string{"computeplane_provisioned_to_ready_seconds", "computeplane_applier_credentials_issued_total"} {
			if value(ready, m, nil) <= value(before, m, nil) {
				stale = append(stale, m)
			}
		}
		if len(stale) > 0 {
			ready = scrape()
			return fmt.Errorf("%v did not move when the plane became Ready", stale)
		}
		return nil
	})
	readyTrue := map[string]string{"type": cpv1.ReadyCondition, "status": "True", "reason": cpv1.SucceededReason}
	// The gauges are read at scrape time from the manager's cache, which may trail the
	// Ready plane readyPlane read from the API server by a moment.
	eventually(t, 10*time.Second, func() error {
		if value(ready, "computeplane_planes", readyTrue) < 1 {
			ready = scrape()
			return fmt.Errorf("computeplane_planes%v counts no Ready plane", readyTrue)
		}
		if value(ready, "computeplane_plane_connection_up", planeLabels) != 1 {
			ready = scrape()
			return fmt.Errorf("computeplane_plane_connection_up%v is not 1 for a Ready plane", planeLabels)
		}
		return nil
	})

	// Drift: a plane admin (or an attacker with its rights) deletes one of the plane's
	// admission policies; the operator restores it.
	victim := operatorPolicy(t, ctx, tenant)
	settled := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, key, settled); err != nil {
		t.Fatal(err)
	}
	readySince := apimeta.FindStatusCondition(settled.Status.Conditions, cpv1.ReadyCondition).LastTransitionTime
	time.Sleep(time.Second) // transition times have a one-second resolution
	deletedAt := time.Now()
	if err := tenant.Client.Delete(ctx, victim); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, driftReported(ctx, p, victim.Name))
	// Ready went False and came back (the gate closed, the credential was re-issued).
	var repaired map[string]*dto.MetricFamily
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		ready := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReadyCondition)
		if ready.Status != metav1.ConditionTrue || !ready.LastTransitionTime.After(readySince.Time) {
			return fmt.Errorf("Ready = %s since %s (was True since %s before the drift at %s), want True again after the drift; events: %s",
				ready.Status, ready.LastTransitionTime, readySince, deletedAt.Format(time.RFC3339Nano), planeEvents(ctx, p))
		}
		// The credential still issued after the scrape: any closing of the gate from here
		// on (a plane request timing out under load counts too) is a revocation the
		// counter must show after the scrape.
		repaired = scrape()
		if err := k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}); err != nil {
			return fmt.Errorf("Ready is True again but the applier credential is not issued (%v)", err)
		}
		return nil
	})
	if value(repaired, "computeplane_drift_repairs_total", map[string]string{"stage": cpv1.PodSecurityCondition}) <=
		value(ready, "computeplane_drift_repairs_total", map[string]string{"stage": cpv1.PodSecurityCondition}) {
		t.Errorf("computeplane_drift_repairs_total did not move on a repaired drift")
	}

	// The plane's datastore goes: the connection gauge drops, the gate closes (a
	// revocation) and Ready=False is counted; all come back with it.
	if err := tenant.StopEtcd(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = tenant.StartEtcd()
		}
	})
	eventually(t, settle, gateClosed(ctx, p))
	eventually(t, settle, func() error {
		f := scrape()
		if v := value(f, "computeplane_plane_connection_up", planeLabels); v != 0 {
			return fmt.Errorf("computeplane_plane_connection_up = %v with the plane's etcd stopped", v)
		}
		if now, then := value(f, "computeplane_applier_credentials_revoked_total", map[string]string{"reason": "GateClosed"}),
			value(repaired, "computeplane_applier_credentials_revoked_total", map[string]string{"reason": "GateClosed"}); now <= then {
			return fmt.Errorf("computeplane_applier_credentials_revoked_total{reason=GateClosed} did not move (%v, %v); events: %s", then, now, planeEvents(ctx, p))
		}
		if value(f, "computeplane_planes", map[string]string{"type": cpv1.ReadyCondition, "status": "False"}) < 1 {
			return fmt.Errorf("computeplane_planes counts no plane with Ready=False")
		}
		return nil
	})
	restarted = true
	if err := tenant.StartEtcd(); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	if v := value(scrape(), "computeplane_plane_connection_up", planeLabels); v != 1 {
		t.Errorf("computeplane_plane_connection_up = %v after the plane recovered", v)
	}
}

// planeEvents lists the plane's events in order, for a failure message.
func planeEvents(ctx context.Context, p *cpv1.ComputePlane) string {
	var evs eventsv1.EventList
	if err := k8s.List(ctx, &evs, client.InNamespace(p.Namespace)); err != nil {
		return err.Error()
	}
	sort.Slice(evs.Items, func(i, j int) bool { return evs.Items[i].EventTime.Before(&evs.Items[j].EventTime) })
	var b strings.Builder
	for _, e := range evs.Items {
		if e.Regarding.UID == p.UID {
			fmt.Fprintf(&b, "\n  %s %s %s", e.EventTime.Format(time.RFC3339Nano), e.Reason, e.Note)
		}
	}
	return b.String()
}
