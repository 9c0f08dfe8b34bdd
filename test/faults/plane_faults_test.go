package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
)

// TestPlaneAPIServerKilled: the plane's apiserver dies and, while it is down, another
// cluster's apiserver comes up on its address (a rescheduled pod of someone else's
// control plane, or an attacker). The gate closes after the grace; nothing of the
// operator's reaches the impostor (the plane's CA does not vouch for it); the gate
// opens again only once the plane itself is back.
func TestPlaneAPIServerKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	waitFor(t, 2*time.Minute, readyIs(ctx, p, metav1.ConditionTrue))
	tenant := tenantOf(t, ctx, p)
	port := tenant.Env.ControlPlane.APIServer.SecurePort

	killed := time.Now()
	if err := tenant.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	impostor, err := devenv.StartTenantWith(scheme, devenv.TenantOptions{Audit: true, SecurePort: port})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = impostor.Stop() }()
	waitFor(t, time.Minute, func() error {
		if err := readyIs(ctx, p, metav1.ConditionFalse)(); err != nil {
			return err
		}
		return gateClosed(ctx, p)
	})
	figure(t, "apiserver killed → gate closed", time.Since(killed))
	// The impostor serves on the plane's address for a while: the operator keeps trying
	// the plane there, and must neither talk to it nor open the gate.
	hold := time.Now().Add(10 * time.Second)
	for time.Now().Before(hold) {
		if err := readyIs(ctx, p, metav1.ConditionFalse)(); err != nil {
			t.Fatalf("the gate opened while an impostor served on the plane's address: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	events, err := devenv.ReadAudit(impostor.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		// The impostor's own start-up checks its health anonymously.
		health := e.RequestURI == "/healthz" || e.RequestURI == "/readyz" || e.RequestURI == "/livez"
		if u := e.User.Username; u == "kubernetes-super-admin" || (u == "system:anonymous" && !health) {
			t.Errorf("the impostor was asked %s %s by %s: the operator talked to the wrong cluster", e.Verb, e.RequestURI, u)
		}
	}
	if err := impostor.Stop(); err != nil {
		t.Fatal(err)
	}

	restarted := time.Now()
	if err := tenant.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, readyIs(ctx, p, metav1.ConditionTrue))
	figure(t, "apiserver restarted → Ready", time.Since(restarted))
}

// TestPlaneEtcdStopped: the plane's datastore dies while its apiserver still answers
// /version. The gate closes after the grace and opens once etcd is back.
func TestPlaneEtcdStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	waitFor(t, 2*time.Minute, readyIs(ctx, p, metav1.ConditionTrue))
	tenant := tenantOf(t, ctx, p)
	stopped := time.Now()
	if err := tenant.StopEtcd(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, func() error {
		if err := readyIs(ctx, p, metav1.ConditionFalse)(); err != nil {
			return err
		}
		return gateClosed(ctx, p)
	})
	figure(t, "etcd stopped → gate closed (grace 8 s)", time.Since(stopped))
	started := time.Now()
	if err := tenant.StartEtcd(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, readyIs(ctx, p, metav1.ConditionTrue))
	figure(t, "etcd started → Ready", time.Since(started))
}

// TestSlowPlaneReleasesTheWorker: the plane's API answers every request, each 0.4 s
// late: well inside --plane-timeout (3 s), yet a full read of the plane (dozens of
// requests) would hold a worker for half a minute, and a plane a little slower for many
// minutes. The pass gives up at --plane-pass-timeout (8 s) and the gate closes saying
// so; it opens again once the plane answers promptly.
func TestSlowPlaneReleasesTheWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	waitFor(t, 2*time.Minute, readyIs(ctx, p, metav1.ConditionTrue))
	tenant := tenantOf(t, ctx, p)
	if err := tenant.SetLatency(400 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tenant.SetLatency(0) }()
	slowed := time.Now()
	// A quiet Ready plane is only probed; a reconcile request reads it in full.
	patch := client.MergeFrom(p.DeepCopy())
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, "reconcile.fluxcd.io/requestedAt", slowed.Format(time.RFC3339Nano))
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		ready := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReadyCondition)
		if ready == nil || ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "--plane-pass-timeout") {
			return fmt.Errorf("Ready = %+v", ready)
		}
		return gateClosed(ctx, p)
	})
	figure(t, "plane 0.4 s late per request → pass cut at 8 s, gate closed", time.Since(slowed))

	if err := tenant.SetLatency(0); err != nil {
		t.Fatal(err)
	}
	prompt := time.Now()
	waitFor(t, 2*time.Minute, readyIs(ctx, p, metav1.ConditionTrue))
	figure(t, "plane prompt again → Ready", time.Since(prompt))
}

// TestAdminKubeconfigRotated: Kamaji replaces the plane's admin kubeconfig (a new client
// certificate for the same user, as its rotation does). The operator moves to the new
// one at its next look, and the gate never closes. The rotated certificate carries an
// extra group, so the plane's audit log tells which certificate each request used.
func TestAdminKubeconfigRotated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	waitFor(t, 2*time.Minute, readyIs(ctx, p, metav1.ConditionTrue))
	tenant := tenantOf(t, ctx, p)

	var closedSeen atomic.Int32
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		for watchCtx.Err() == nil {
			if err := readyIs(watchCtx, p, metav1.ConditionTrue)(); err != nil && watchCtx.Err() == nil {
				closedSeen.Add(1)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	for i := range 2 {
		group := fmt.Sprintf("computeplane-faults:rotation-%d", i)
		rotateAdmin(t, ctx, p, tenant, group)
		figure(t, fmt.Sprintf("rotation %d → operator's first request with the new certificate", i+1),
			waitFor(t, time.Minute, usedCertificate(tenant, group)))
	}
	// A few more looks on the new credential.
	time.Sleep(6 * time.Second)
	stopWatch()
	if n := closedSeen.Load(); n > 0 {
		t.Errorf("the gate was seen closed %d times during the rotations", n)
	}
	if err := readyIs(ctx, p, metav1.ConditionTrue)(); err != nil {
		t.Fatal(err)
	}
	note(t, "gate closed during two rotations", "never")
}

// rotateAdmin writes a new admin kubeconfig (a new client certificate for the same user,
// with an extra group) into the Secret Kamaji keeps it in, as Kamaji's rotation does.
func rotateAdmin(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, tenant *devenv.Cluster, group string) {
	t.Helper()
	fresh, err := devenv.AdminKubeconfigSecret(tenant, p.Status.InfrastructureNamespace, render.ClusterName(p), group)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(fresh), secret); err != nil {
		t.Fatal(err)
	}
	secret.Data = fresh.Data
	if err := k8s.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
}

// usedCertificate holds once the plane's audit log shows a request of the admin user
// with the certificate that carries group.
func usedCertificate(tenant *devenv.Cluster, group string) func() error {
	return func() error {
		events, err := devenv.ReadAudit(tenant.AuditLog)
		if err != nil {
			return err
		}
		for _, e := range events {
			if e.User.Username == devenv.AdminUser && slices.Contains(e.User.Groups, group) {
				return nil
			}
		}
		return fmt.Errorf("no request with the certificate of %s yet", group)
	}
}
