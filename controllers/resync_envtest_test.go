package controllers_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/tenancy"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/internal/devenv"
)

// TestQuietPlaneIsOnlyProbed: at rest, a Ready plane whose watches report nothing costs
// each pass the storage probe in the plane and, on the management cluster, the admin
// credential's Secret and the applier Secret (which the tenant may write), not a full
// read (the "watches and the periodic probe"); and a change the watches see
// still closes the gate and is repaired at once.
func TestQuietPlaneIsOnlyProbed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tenant, err := devenv.StartTenantWith(k8s.Scheme(), devenv.TenantOptions{Audit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	p := planeWithClass(t, ctx, newClass("quiet-"+rand.String(6)),
		func(p *cpv1.ComputePlane) { p.Spec.PlacementNamespaces = []string{"notebooks"} })
	provideWithTenant(t, ctx, p, tenant)
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))

	// At rest once a pass has found nothing to write (the passes right after bring-up
	// still see the watches report the operator's own writes).
	atRest := func() {
		t.Helper()
		eventually(t, settle, func() error {
			from := time.Now()
			time.Sleep(3 * time.Second) // a pass every 2 s
			events, err := devenv.ReadAudit(tenant.AuditLog)
			if err != nil {
				return err
			}
			if full := planeFullReads(events, from); len(full) > 0 {
				return fmt.Errorf("not at rest yet: %v", full)
			}
			return nil
		})
	}
	atRest()
	from := time.Now()
	time.Sleep(8 * time.Second)
	to := time.Now()

	events, err := devenv.ReadAudit(tenant.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	if full := planeFullReads(events, from); len(full) > 0 {
		t.Errorf("a quiet plane was read past the probe: %v", full)
	}
	probes := 0
	for _, ev := range operatorRequests(events, from) {
		if ev.Verb == "get" && ev.ObjectRef.Resource == "namespaces" && ev.ObjectRef.Name == "kube-system" {
			probes++
		}
	}
	if probes < 2 {
		t.Errorf("%d storage probes in 8 s of passes every 2 s: the plane is not looked at", probes)
	}
	mgmtEvents, err := devenv.ReadAudit(mgmt.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	infra := infraOf(p)
	var mgmtReads []string
	for _, ev := range mgmtEvents {
		if ev.User.Username != devenv.OperatorUser || ev.Stage != "ResponseComplete" || ev.ObjectRef == nil ||
			ev.RequestReceived.Before(from) || ev.RequestReceived.After(to) ||
			(ev.ObjectRef.Namespace != p.Namespace && ev.ObjectRef.Namespace != infra) {
			continue
		}
		if ev.Verb == "get" && ev.ObjectRef.Resource == "secrets" && ev.ObjectRef.Namespace == infra {
			continue // the admin credential: Secrets are never cached
		}
		if ev.Verb == "get" && ev.ObjectRef.Resource == "secrets" && ev.ObjectRef.Namespace == p.Namespace &&
			ev.ObjectRef.Name == tenancy.ApplierSecretName(p) {
			continue // the applier Secret: the tenant may write it and no watch reports it
		}
		if ev.ObjectRef.Resource == "events" {
			continue // the event recorder flushing the series of earlier transitions
		}
		mgmtReads = append(mgmtReads, ev.Verb+" "+ev.ObjectRef.Resource+" "+ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name)
	}
	if len(mgmtReads) > 0 {
		t.Errorf("a quiet plane cost requests to the management cluster beyond its admin credential and applier Secret: %v", mgmtReads)
	}

	changedBefore := fullReads("Changed")
	deletedBefore := counter("computeplane_plane_watch_events_total", map[string]string{"resource": "validatingadmissionpolicies", "event": "DELETED"})

	// The watches still see a policy go: the gate closes and the policy is back.
	victim := operatorPolicy(t, ctx, tenant)
	if err := tenant.Client.Delete(ctx, victim); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, driftReported(ctx, p, victim.Name))
	eventually(t, settle, func() error {
		if err := tenant.Client.Get(ctx, client.ObjectKeyFromObject(victim), &admissionv1.ValidatingAdmissionPolicy{}); err != nil {
			return fmt.Errorf("the deleted policy is not restored: %w", err)
		}
		return conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason)()
	})
	if fullReads("Changed") <= changedBefore {
		t.Error(`computeplane_plane_full_reads_total{reason="Changed"} did not move when the watches saw a policy deleted`)
	}
	if counter("computeplane_plane_watch_events_total", map[string]string{"resource": "validatingadmissionpolicies", "event": "DELETED"}) <= deletedBefore {
		t.Error(`computeplane_plane_watch_events_total{resource="validatingadmissionpolicies",event="DELETED"} did not move when a policy was deleted`)
	}

	// At rest again, a cluster-admin of the plane who is not the operator adds a
	// MutatingAdmissionPolicy and binds it (no admission policy can refuse either;
	// nothing of the operator's changed): the gate closes within the settle time, well
	// before the full read the suite's one-minute resync interval would bring.
	atRest()
	mallory := asUser(t, tenant, "mallory")
	if err := mallory.Create(ctx, privilegedMutatingPolicy()); err != nil {
		t.Fatalf("the plane refused a MutatingAdmissionPolicy (then this attack needs no defence): %v", err)
	}
	if err := mallory.Create(ctx, privilegedMutatingBinding()); err != nil {
		t.Fatalf("the plane refused a MutatingAdmissionPolicyBinding (then this attack needs no defence): %v", err)
	}
	eventually(t, settle, gateClosed(ctx, p))
}

// fullReads is the in-process manager's computeplane_plane_full_reads_total{reason}.
func fullReads(reason string) float64 {
	return counter("computeplane_plane_full_reads_total", map[string]string{"reason": reason})
}

// counter is the in-process manager's counter of that name with those labels (0 when
// it has not counted yet).
func counter(name string, labels map[string]string) float64 {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			matched := 0
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
					matched++
				}
			}
			if matched == len(labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// operatorPolicy is one of the operator's admission policies in the plane.
func operatorPolicy(t *testing.T, ctx context.Context, tenant *devenv.Cluster) *admissionv1.ValidatingAdmissionPolicy {
	t.Helper()
	var vaps admissionv1.ValidatingAdmissionPolicyList
	if err := tenant.Client.List(ctx, &vaps); err != nil {
		t.Fatal(err)
	}
	for i := range vaps.Items {
		if strings.HasPrefix(vaps.Items[i].Name, "computeplane-") {
			return &vaps.Items[i]
		}
	}
	t.Fatal("the plane has no operator admission policy")
	return nil
}

// operatorRequests are the plane's audited requests by the operator's own identity (not
// the canary it impersonates, nor the applier) received after from.
func operatorRequests(events []devenv.AuditEvent, from time.Time) []devenv.AuditEvent {
	var out []devenv.AuditEvent
	for _, ev := range events {
		if ev.User.Username == devenv.AdminUser && ev.ImpersonatedUser == nil && ev.ObjectRef != nil &&
			ev.Stage == "ResponseComplete" && !ev.RequestReceived.Before(from) {
			out = append(out, ev)
		}
	}
	return out
}

// planeFullReads are the operator's requests to the plane since from that are neither the
// storage probe nor its watches.
func planeFullReads(events []devenv.AuditEvent, from time.Time) []string {
	seen := map[string]int{}
	for _, ev := range operatorRequests(events, from) {
		if ev.Verb == "watch" || ev.Verb == "get" && ev.ObjectRef.Resource == "namespaces" && ev.ObjectRef.Name == "kube-system" {
			continue
		}
		seen[ev.Verb+" "+ev.ObjectRef.Resource]++
	}
	var out []string
	for k, n := range seen {
		out = append(out, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(out)
	return out
}
