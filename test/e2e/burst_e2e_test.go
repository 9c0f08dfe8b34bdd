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

	"github.com/cozystack/computeplane/controllers/tenancy"
	"github.com/cozystack/computeplane/remote/posture"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/gateaudit"
)

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

// burstRetries is how often a burst release retries a refused install or upgrade: the
// suite's class allows that many.
const burstRetries = 100

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
				// A write refused mid-install (the gate closed under it) is retried, as
				// often as the suite's class allows (never forever: refused at admission).
				hr.Spec.Install.Remediation = &helmv2.InstallRemediation{Retries: burstRetries}
				hr.Spec.Upgrade.Remediation = &helmv2.UpgradeRemediation{Retries: burstRetries}
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

	var all gateaudit.Result
	drifts := 0
	for i, p := range planes {
		g := checkGateInAudit(t, ctx, p)
		all.Violations, all.Raced = append(all.Violations, g.Violations...), append(all.Raced, g.Raced...)
		all.Writes, all.Closings = all.Writes+g.Writes, all.Closings+g.Closings
		all.Detect = append(all.Detect, g.Detect...)
		drifts += flaps[i]
		if g.Closings < flaps[i] {
			t.Errorf("plane %s drifted %d times but its audit log shows %d revocations", p.Namespace, flaps[i], g.Closings)
		}
	}
	sort.Slice(all.Detect, func(a, b int) bool { return all.Detect[a] < all.Detect[b] })
	var sum time.Duration
	for _, d := range all.Detect {
		sum += d
	}
	if n := len(all.Detect); n > 0 {
		t.Logf("FIGURE drift → credential revoked in the plane: mean %s, max %s (%d closings)",
			(sum / time.Duration(n)).Round(time.Millisecond), all.Detect[n-1].Round(time.Millisecond), n)
	}
	t.Logf("FIGURE flapping: %d drifts, %d gate closings in the planes' audit logs; %d writes by the applier, %d while a gate was closed, %d racing a revocation (within %s of its impersonation binding's deletion)",
		drifts, all.Closings, all.Writes, len(all.Violations), len(all.Raced), gateaudit.RevocationWindow)
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
	names := posture.PolicyNames()
	done := 0
	secretKey := client.ObjectKey{Namespace: p.Namespace, Name: tenancy.ApplierSecretName(p)}
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

// checkGateInAudit judges a plane's gate from its audit log (gateaudit.Judge): each
// violation fails the test, each write that raced a revocation is logged.
func checkGateInAudit(t *testing.T, ctx context.Context, p *cpv1.ComputePlane) gateaudit.Result {
	t.Helper()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	tenant := provider.Tenant(types.NamespacedName{Namespace: p.Status.InfrastructureNamespace, Name: render.ClusterName(p)})
	events, err := devenv.ReadAudit(tenant.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	g := gateaudit.Judge(events, p.Namespace, posture.PolicyNames())
	for _, v := range g.Violations {
		t.Errorf("plane %s: %s", p.Namespace, v)
	}
	for _, r := range g.Raced {
		t.Logf("plane %s: %s", p.Namespace, r)
	}
	if len(g.Violations) > 0 {
		t.Logf("plane %s: gate trail:\n%s", p.Namespace, strings.Join(g.Trail, "\n"))
	}
	return g
}
