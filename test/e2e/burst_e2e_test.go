package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/remote"
)

// applierUser is who the applier kubeconfig authenticates as in a plane.
const applierUser = "system:serviceaccount:" + remote.ApplierNamespace + ":" + remote.ApplierName

// burstSize is the burst's planes and releases per plane, from E2E_BURST=planes,releases
// (`make burst`: 10,100; 50,20 for 50 planes, each a real kube-apiserver: on two cores 50
// of them idle take most of the CPU).
func burstSize(t *testing.T) (planes, releases int) {
	v := os.Getenv("E2E_BURST")
	if v == "" {
		// Ten minutes and more: `make burst` runs it (CI does, after the fault suite).
		t.Skip("E2E_BURST is not set; `make burst` runs 1,000 releases over 10 planes")
	}
	if _, err := fmt.Sscanf(v, "%d,%d", &planes, &releases); err != nil {
		t.Fatalf("E2E_BURST=%q: want planes,releases", v)
	}
	return planes, releases
}

// TestBurstWithFlappingGates: a burst of placement releases across many planes while
// every other plane's gate flaps (a plane administrator deletes one of the operator's
// admission policies; the operator closes the gate, restores the policy and opens it
// again, backing off as drifts repeat). Every release ends installed, and the planes'
// own audit logs show that the real Flux helm-controller wrote nothing into a plane
// while its gate was closed: no write by the applier between the operator's revocation
// (the applier ServiceAccount deleted) and its re-issue, and no re-issue before the
// drifted policy was restored. The operator acts in a plane as its admin user
// (devenv.AdminUser); the test drifts it as another.
func TestBurstWithFlappingGates(t *testing.T) {
	nPlanes, perPlane := burstSize(t)
	// Bringing planes up is most of it at 50 (each a real kube-apiserver).
	ctx, cancel := context.WithTimeout(context.Background(), max(25*time.Minute, time.Duration(nPlanes)*40*time.Second))
	defer cancel()

	start := time.Now()
	planes := make([]*cpv1.ComputePlane, nPlanes)
	for i := range planes {
		planes[i] = newPlane(t, ctx)
	}
	for _, p := range planes {
		eventually(t, 10*time.Minute, planeReady(ctx, p))
	}
	t.Logf("FIGURE %d planes created → all Ready: %s", nPlanes, time.Since(start).Round(time.Second))

	burst := time.Now()
	var releases []*helmv2.HelmRelease
	for _, p := range planes {
		for j := range perPlane {
			hr := release(p.Namespace, "burst-"+strconv.Itoa(j), "app", "v1", func(hr *helmv2.HelmRelease) {
				// A write refused mid-install (the gate closed under it) is retried.
				hr.Spec.Install.Remediation = &helmv2.InstallRemediation{Retries: -1}
				hr.Spec.Upgrade.Remediation = &helmv2.UpgradeRemediation{Retries: -1}
			})
			create(t, ctx, hr)
			releases = append(releases, hr)
		}
	}

	// Every other plane flaps five times while the burst installs.
	flaps := make([]int, nPlanes)
	var wg sync.WaitGroup
	for i := 0; i < nPlanes; i += 2 {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			flaps[i] = flap(t, ctx, planes[i], 5)
		}(i)
	}
	wg.Wait()
	for _, hr := range releases {
		eventually(t, 10*time.Minute, releaseReady(ctx, hr))
	}
	t.Logf("FIGURE %d releases across %d planes, created → all installed (with flapping): %s",
		len(releases), nPlanes, time.Since(burst).Round(time.Second))

	var all gateAudit
	drifts := 0
	for i, p := range planes {
		g := checkGateInAudit(t, ctx, p)
		all.violations, all.writes, all.closings, all.raced = all.violations+g.violations, all.writes+g.writes, all.closings+g.closings, all.raced+g.raced
		all.detect = append(all.detect, g.detect...)
		drifts += flaps[i]
		if g.closings < flaps[i] {
			t.Errorf("plane %s drifted %d times but its audit log shows %d revocations", p.Namespace, flaps[i], g.closings)
		}
	}
	sort.Slice(all.detect, func(a, b int) bool { return all.detect[a] < all.detect[b] })
	var sum time.Duration
	for _, d := range all.detect {
		sum += d
	}
	if n := len(all.detect); n > 0 {
		t.Logf("FIGURE drift → credential revoked in the plane: mean %s, max %s (%d closings)",
			(sum / time.Duration(n)).Round(time.Millisecond), all.detect[n-1].Round(time.Millisecond), n)
	}
	t.Logf("FIGURE flapping: %d drifts, %d gate closings in the planes' audit logs; %d writes by the applier, %d while a gate was closed, %d racing a revocation (within %s of its impersonation binding's deletion)",
		drifts, all.closings, all.writes, all.violations, all.raced, revocationWindow)
}

// create creates obj, retrying what a loaded API server answers for a while (a webhook
// call that timed out, a throttled request), as a client such as Flux would.
func create(t *testing.T, ctx context.Context, obj client.Object) {
	t.Helper()
	eventually(t, 2*time.Minute, func() error {
		err := k8s.Create(ctx, obj)
		switch {
		case err == nil:
			return nil
		case apierrors.IsAlreadyExists(err):
			return nil // an earlier try landed after all
		case apierrors.IsInternalError(err), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err):
			return err
		}
		t.Fatal(err)
		return nil
	})
}

// flap deletes one of the operator's admission policies in the plane n times, each time
// once the gate has closed and reopened after the last, and returns how many drifts it
// made.
func flap(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, n int) int {
	plane := planeClient(t, ctx, p)
	names := remote.PolicyNames()
	done := 0
	secretKey := client.ObjectKey{Namespace: p.Namespace, Name: render.ApplierSecretName(p)}
	for i := range n {
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
		before := &corev1.Secret{}
		if err := k8s.Get(ctx, secretKey, before); err != nil {
			t.Errorf("the applier Secret of %s before drift %d: %v", p.Namespace, i, err)
			return done
		}
		vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		vap.Name = names[i%len(names)]
		if err := plane.Delete(ctx, vap); client.IgnoreNotFound(err) != nil {
			t.Errorf("drifting %s: %v", p.Namespace, err)
			return done
		}
		done++
		// Closed and open again: a new applier Secret (the old one was deleted with the
		// gate) and Ready.
		eventually(t, 5*time.Minute, func() error {
			after := &corev1.Secret{}
			if err := k8s.Get(ctx, secretKey, after); err != nil {
				return err
			}
			if after.UID == before.UID {
				return errors.New("the gate has not closed and reopened yet")
			}
			return planeReady(ctx, p)()
		})
	}
	return done
}

// gateAudit is what a plane's audit log says about its gate.
type gateAudit struct {
	// violations: writes by the applier while the gate was closed, and credentials issued
	// (or the applier's binding written back) after the operator had found a policy missing.
	violations int
	writes     int
	// raced: writes received while the revocation was taking effect (revocationWindow).
	raced    int
	closings int
	// detect is, per closing after a drift, drift → credential revoked.
	detect []time.Duration
}

// revocationWindow bounds how long a revocation takes to take effect once the applier's
// impersonation RoleBinding is deleted: the plane's apiserver authorizes against its own
// cache of RoleBindings, so a request received a few milliseconds after the deletion
// completed may still pass. The applier's ServiceAccount, deleted next, is no cut: the
// apiserver caches a token's successful authentication for 10 s.
const revocationWindow = 100 * time.Millisecond

// checkGateInAudit reads a plane's audit log in the order its apiserver received the
// requests. The applier may do nothing but impersonate the deployer, through its
// impersonation RoleBinding: the gate is closing from the completion of the operator's
// deletion of that binding, and closed revocationWindow later, until the operator
// writes the binding again (reopening: a token cached from before still authenticates
// for a while) or issues the applier a new token. A write by the applier while closed
// is a violation; one while closing raced the revocation and is counted apart. A token
// issued, or the binding written back, while one of the operator's policies is deleted
// is a violation when the operator had asked for that policy after the deletion (it
// knew: a pass reads each policy by name); before that it is the drift's detection time,
// which is measured. The watches' lists are signals, not what a pass decides on.
func checkGateInAudit(t *testing.T, ctx context.Context, p *cpv1.ComputePlane) gateAudit {
	t.Helper()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	tenant := provider.Tenant(types.NamespacedName{Namespace: p.Status.InfrastructureNamespace, Name: render.ClusterName(p)})
	events, err := devenv.ReadAudit(tenant.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	impersonation := func(r *devenv.AuditObjectRef) bool {
		return r != nil && r.Resource == "rolebindings" && r.Namespace == p.Namespace && r.Name == remote.ApplierName && r.Subresource == ""
	}
	// A request is placed at its receipt (authentication and authorization happen then),
	// but the revocation at its completion: a write received while the binding's deletion
	// was still in flight was authorized before it took effect.
	revocation := func(e devenv.AuditEvent) bool {
		return e.Verb == "delete" && impersonation(e.ObjectRef)
	}
	when := func(e devenv.AuditEvent) time.Time {
		if revocation(e) {
			return e.StageTime
		}
		return e.RequestReceived
	}
	sort.SliceStable(events, func(a, b int) bool { return when(events[a]).Before(when(events[b])) })
	policies := map[string]bool{}
	for _, n := range remote.PolicyNames() {
		policies[n] = true
	}
	var (
		g       gateAudit
		closing time.Time // the impersonation binding's deletion completed
		closed  bool
		missing = map[string]time.Time{} // policy → when the test deleted it
		read    = map[string]time.Time{} // policy → the operator's last GET of it, whatever the answer
		trail   []string
	)
	defer func() {
		if t.Failed() {
			t.Logf("plane %s: gate trail:\n%s", p.Namespace, strings.Join(trail, "\n"))
		}
	}()
	// opened checks a credential issued or a binding written back at at against the
	// policies the test had deleted.
	opened := func(what string, at time.Time) {
		for name, since := range missing {
			if read[name].After(since) {
				g.violations++
				t.Errorf("plane %s: the operator %s at %s although it had asked for %s at %s, after its deletion (%s)",
					p.Namespace, what, at.Format(time.RFC3339Nano), name, read[name].Format(time.RFC3339Nano), since.Format(time.RFC3339Nano))
			}
		}
		closed, closing = false, time.Time{}
	}
	for _, e := range events {
		r := e.ObjectRef
		if r != nil && e.Stage == "ResponseComplete" && e.User.Username == devenv.AdminUser && e.Verb == "get" &&
			r.Resource == "validatingadmissionpolicies" {
			// A NotFound is what the operator learns a policy is missing from.
			read[r.Name] = when(e)
		}
		if !e.Succeeded() || r == nil {
			continue
		}
		at := when(e)
		if !closing.IsZero() && !closed && at.Sub(closing) > revocationWindow {
			closed = true
		}
		if r.Resource != "secrets" && r.Resource != "configmaps" && (e.Mutating() || r.Resource == "validatingadmissionpolicies") {
			trail = append(trail, fmt.Sprintf("%s %s %s %s/%s %s/%s", at.Format("15:04:05.000000"), e.User.Username, e.Verb, r.Resource, r.Subresource, r.Namespace, r.Name))
		}
		switch {
		case e.User.Username == applierUser:
			if !e.Mutating() {
				continue
			}
			g.writes++
			switch {
			case closed:
				g.violations++
				t.Errorf("plane %s: the applier %s %s %s/%s at %s while the gate was closed",
					p.Namespace, e.Verb, r.Resource, r.Namespace, r.Name, at.Format(time.RFC3339Nano))
			case !closing.IsZero():
				g.raced++
				t.Logf("plane %s: the applier %s %s %s/%s at %s raced the revocation (%s after its impersonation binding's deletion completed)",
					p.Namespace, e.Verb, r.Resource, r.Namespace, r.Name, at.Format(time.RFC3339Nano), at.Sub(closing))
			}
		case e.User.Username != devenv.AdminUser:
			// The test's own drifts.
			if r.Resource == "validatingadmissionpolicies" && policies[r.Name] && e.Verb == "delete" {
				missing[r.Name] = at
			}
		case r.Resource == "validatingadmissionpolicies":
			if e.Mutating() && policies[r.Name] && e.Verb != "delete" {
				delete(missing, r.Name) // restored
			}
		case revocation(e):
			if closing.IsZero() && !closed {
				g.closings++
				if first := earliest(missing); !first.IsZero() {
					g.detect = append(g.detect, at.Sub(first))
				}
				closing = at
			}
		case impersonation(r) && e.Mutating():
			if !closing.IsZero() || closed {
				opened("wrote the applier's impersonation binding back", at)
			}
		case r.Resource == "serviceaccounts" && r.Namespace == remote.ApplierNamespace && r.Name == remote.ApplierName &&
			e.Verb == "create" && r.Subresource == "token":
			opened("issued the applier a token", at)
		}
	}
	return g
}

func earliest(m map[string]time.Time) time.Time {
	var first time.Time
	for _, t := range m {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}
