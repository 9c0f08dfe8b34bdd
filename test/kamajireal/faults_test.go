package kamajireal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/tenancy"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/test/testkit"
)

// TestRealKamajiFaults: what the operator does when the control plane Kamaji runs fails,
// and when Kamaji renews what it owns (v1.0.0 renews a certificate or kubeconfig that is
// missing or invalid: deleting its Secret is how to make it renew now).
//
//  1. The plane's kube-apiserver is SIGKILLed: Kamaji reports the TenantControlPlane
//     NotReady, the gate closes (Ready=False, the applier credential revoked) and opens
//     again once Kamaji reports it Ready.
//  2. The admin kubeconfig Secret is deleted: Kamaji writes new client certificates; the
//     plane is Ready again with them, and Cluster API's <cluster>-kubeconfig follows.
//  3. The serving certificate's Secret is deleted: Kamaji issues a new one and rolls the
//     Deployment out; the plane serves the new certificate and is Ready.
//
// The figures (how long the gate was closed in each) are printed, not asserted.
func TestRealKamajiFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	b := startBed(t, ctx)
	k8s := b.mgmt.Client
	p, tcp, kubeconfig := b.readyPlane(t, ctx)
	infra := tcp.Namespace
	applier := client.ObjectKey{Namespace: p.Namespace, Name: tenancy.ApplierSecretName(p)}
	if err := k8s.Get(ctx, applier, &corev1.Secret{}); err != nil {
		t.Fatalf("no applier credential while the plane is Ready: %v", err)
	}
	tl := watchGate(ctx, k8s, p, applier)
	defer tl.stop()

	// 1. The plane's apiserver crashes.
	killed := time.Now()
	if err := b.kamaji.Runner.Kill(infra, tcp.Name); err != nil {
		t.Fatal(err)
	}
	closed, reopened := tl.closedAndReopened(t, killed, 2*time.Minute)
	if !tl.revokedBetween(closed, reopened) {
		t.Errorf("the applier credential was not revoked while the gate was closed (%s → %s)", closed.Sub(killed), reopened.Sub(killed))
	}
	t.Logf("kube-apiserver SIGKILLed → gate closed %s → open again %s (Kamaji restarts it after 1 s)",
		closed.Sub(killed).Round(time.Millisecond), reopened.Sub(killed).Round(time.Millisecond))
	t.Logf("runner: %s", b.kamaji.Runner.Describe(infra, tcp.Name))

	// 2. Kamaji renews the admin kubeconfig.
	renewed := time.Now()
	if err := k8s.Delete(ctx, kubeconfig); err != nil {
		t.Fatal(err)
	}
	var written time.Duration
	testkit.Poll(t, time.Minute, 50*time.Millisecond, func() error {
		fresh := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kubeconfig), fresh); err != nil {
			return err
		}
		if bytes.Equal(fresh.Data[render.AdminKubeconfigKey], kubeconfig.Data[render.AdminKubeconfigKey]) {
			return errors.New("Kamaji has not written new credentials yet")
		}
		if written == 0 {
			written = time.Since(renewed)
		}
		if !tl.readyNow() {
			return errors.New("the plane is not Ready")
		}
		capi := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: render.ClusterName(p) + "-kubeconfig"}, capi); err != nil {
			return err
		}
		if !bytes.Equal(capi.Data["value"], fresh.Data[render.AdminKubeconfigKey]) {
			return errors.New("Cluster API's kubeconfig Secret does not hold Kamaji's new credential")
		}
		return nil
	})
	t.Logf("admin kubeconfig deleted → Kamaji wrote new credentials %s; gate closed for %s of it; Ready with them %s",
		written.Round(time.Millisecond), tl.closedFor(renewed).Round(time.Millisecond), time.Since(renewed).Round(time.Millisecond))

	// 3. Kamaji renews the serving certificate and rolls the control plane.
	current := &kamajiv1alpha1.TenantControlPlane{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(tcp), current); err != nil {
		t.Fatal(err)
	}
	oldAddr, _ := b.kamaji.Runner.APIServer(infra, tcp.Name)
	rolled := time.Now()
	cert := &corev1.Secret{}
	cert.Namespace, cert.Name = infra, current.Status.Certificates.APIServer.SecretName
	if err := k8s.Delete(ctx, cert); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 2*time.Minute, 50*time.Millisecond, func() error {
		if addr, ok := b.kamaji.Runner.APIServer(infra, tcp.Name); !ok || addr == oldAddr {
			return fmt.Errorf("the new control plane does not serve yet: %s", b.kamaji.Runner.Describe(infra, tcp.Name))
		}
		if !tl.readyNow() {
			return errors.New("the plane is not Ready")
		}
		return nil
	})
	t.Logf("serving certificate deleted → the rolled control plane serves and the plane is Ready %s; gate closed for %s of it",
		time.Since(rolled).Round(time.Millisecond), tl.closedFor(rolled).Round(time.Millisecond))
}

// gateTimeline samples a plane's Ready condition and its applier credential every 50 ms.
type gateTimeline struct {
	mu      sync.Mutex
	samples []gateSample
	done    chan struct{}
	cancel  context.CancelFunc
}

type gateSample struct {
	at             time.Time
	ready, applier bool
}

func watchGate(ctx context.Context, c client.Client, p *cpv1.ComputePlane, applier client.ObjectKey) *gateTimeline {
	ctx, cancel := context.WithCancel(ctx)
	tl := &gateTimeline{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(tl.done)
		for ctx.Err() == nil {
			got := &cpv1.ComputePlane{}
			err := c.Get(ctx, client.ObjectKeyFromObject(p), got)
			aerr := c.Get(ctx, applier, &corev1.Secret{})
			if err == nil && (aerr == nil || apierrors.IsNotFound(aerr)) {
				tl.mu.Lock()
				tl.samples = append(tl.samples, gateSample{at: time.Now(),
					ready: apimeta.IsStatusConditionTrue(got.Status.Conditions, cpv1.ReadyCondition), applier: aerr == nil})
				tl.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return tl
}

func (tl *gateTimeline) stop() { tl.cancel(); <-tl.done }

func (tl *gateTimeline) readyNow() bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.samples) > 0 && tl.samples[len(tl.samples)-1].ready
}

// closedAndReopened waits for the first sample after since that is not Ready and the
// first Ready one after it.
func (tl *gateTimeline) closedAndReopened(t *testing.T, since time.Time, timeout time.Duration) (closed, reopened time.Time) {
	t.Helper()
	testkit.Poll(t, timeout, 50*time.Millisecond, func() error {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		closed, reopened = time.Time{}, time.Time{}
		for _, s := range tl.samples {
			switch {
			case s.at.Before(since):
			case closed.IsZero() && !s.ready:
				closed = s.at
			case !closed.IsZero() && s.ready:
				reopened = s.at
				return nil
			}
		}
		if closed.IsZero() {
			return errors.New("the gate has not closed")
		}
		return errors.New("the gate has not opened again")
	})
	return closed, reopened
}

// revokedBetween says whether a sample in [from, to) saw no applier credential.
func (tl *gateTimeline) revokedBetween(from, to time.Time) bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, s := range tl.samples {
		if !s.at.Before(from) && s.at.Before(to) && !s.applier {
			return true
		}
	}
	return false
}

// closedFor is how long, of the samples since, the gate was closed.
func (tl *gateTimeline) closedFor(since time.Time) time.Duration {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var total time.Duration
	for i, s := range tl.samples {
		if s.at.Before(since) || s.ready || i+1 == len(tl.samples) {
			continue
		}
		total += tl.samples[i+1].at.Sub(s.at)
	}
	return total
}
