package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// installedRelease creates a placement release in the plane's namespace and records it
// installed, as Flux does, once the placement controller holds it with its finalizer.
func installedRelease(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, name string, opts ...releaseOpt) *helmv2.HelmRelease {
	t.Helper()
	hr := placementRelease(p.Namespace, name, opts...)
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(hr, cpv1.PlacementFinalizer) {
			return errors.New("no placement finalizer yet")
		}
		hr.Status.StorageNamespace = p.Namespace
		return k8s.Status().Update(ctx, hr)
	})
	return hr
}

// uninstalled records the release uninstalled, as Flux does once it has.
func uninstalled(t *testing.T, ctx context.Context, hr *helmv2.HelmRelease) {
	t.Helper()
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
			return err
		}
		hr.Status.StorageNamespace = ""
		return k8s.Status().Update(ctx, hr)
	})
}

func removeFinalizer(t *testing.T, ctx context.Context, hr *helmv2.HelmRelease, f string) {
	t.Helper()
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
			return client.IgnoreNotFound(err)
		}
		// A patch of the finalizers alone: the webhook keeps a deleted release's spec.
		patch := client.MergeFrom(hr.DeepCopy())
		controllerutil.RemoveFinalizer(hr, f)
		return client.IgnoreNotFound(k8s.Patch(ctx, hr, patch))
	})
}

// deletionStage checks the stage the teardown waits on.
func deletionStage(ctx context.Context, key client.ObjectKey, stage string) func() error {
	return func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		if got.Status.Deletion == nil || got.Status.Deletion.Stage != stage {
			return fmt.Errorf("teardown at %+v, want %s", got.Status.Deletion, stage)
		}
		return nil
	}
}

// TestAttackForeignFinalizerKeepsTheCredential: a tenant adds a finalizer of its own to
// a placement release (the placement guard forbids removing the operator's, not adding
// one). Once Flux has uninstalled it, nothing the plane holds needs the credential: the
// teardown goes on and revokes it, though the release object stays for its finalizer.
func TestAttackForeignFinalizerKeepsTheCredential(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("foreign-fin-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	const hold = "tenant.example.com/hold"
	hr := installedRelease(t, ctx, p, "app", func(hr *helmv2.HelmRelease) { hr.Finalizers = []string{hold} })
	defer removeFinalizer(t, ctx, hr, hold)

	deleteWithReleases(t, ctx, p)
	eventually(t, settle, deletionStage(ctx, key, cpv1.UninstallingPlacementReason))
	uninstalled(t, ctx, hr)
	eventually(t, settle, planeGone(ctx, key))
	if err := k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the applier credential outlived the plane (err=%v)", err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil || !controllerutil.ContainsFinalizer(hr, hold) {
		t.Errorf("the tenant's finalizer was not left alone (err=%v, finalizers %v)", err, hr.Finalizers)
	}
}

// TestAttackUnservedShardKeepsTheCredential: a tenant labels a placement release for a
// Flux shard no controller serves, so Flux never uninstalls it. The teardown keeps the
// credential only for the class's uninstallTimeout, then revokes it and is Stalled,
// naming the label; a platform operator's abandon finishes it.
func TestAttackUnservedShardKeepsTheCredential(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	class := newClass("unserved-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.PlacementReleases.UninstallTimeout = &metav1.Duration{Duration: 10 * time.Second}
	})
	p, _ := readyPlane(t, ctx, class)
	key := client.ObjectKeyFromObject(p)
	hr := installedRelease(t, ctx, p, "app", func(hr *helmv2.HelmRelease) {
		hr.Labels[cpv1.ShardKeyLabel] = "nobody"
		// As Flux had added it when it installed the release.
		hr.Finalizers = []string{helmv2.HelmReleaseFinalizer}
	})
	defer removeFinalizer(t, ctx, hr, helmv2.HelmReleaseFinalizer)

	deleteWithReleases(t, ctx, p)
	eventually(t, settle, func() error { return k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}) })
	eventually(t, time.Minute, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.StalledCondition)
		if c == nil || c.Reason != cpv1.UninstallTimedOutReason || !strings.Contains(c.Message, cpv1.ShardKeyLabel+"=nobody") {
			return fmt.Errorf("Stalled = %+v", c)
		}
		if apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReconcilingCondition) != nil {
			return errors.New("Reconciling and Stalled are both set")
		}
		if err := k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the uninstall credential outlived the timeout (err=%v)", err)
		}
		return nil
	})
	// It stays revoked: the teardown does not issue it again on later passes.
	time.Sleep(3 * time.Second)
	if err := k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the credential was issued again after the timeout (err=%v)", err)
	}

	bob := platformOperator(t, ctx, "bob-"+rand.String(4))
	eventually(t, settle, func() error { return annotate(ctx, bob, p, cpv1.AbandonAnnotation, "shard nobody is gone, ticket 7") })
	eventually(t, settle, planeGone(ctx, key))
}

// TestAttackDriftDuringTeardownGetsNoCredential: while the teardown waits for Flux, a
// plane admin (or a workload that became one) removes one of the plane's admission
// policy bindings. The teardown runs no hardening stage, yet it must not hand out the
// uninstall credential over a plane that is not as the operator left it: it revokes it,
// restores the binding, and issues a new one only once the plane reads back as applied
// and in force.
func TestAttackDriftDuringTeardownGetsNoCredential(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, tenant := readyPlane(t, ctx, newClass("teardown-drift-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	hr := installedRelease(t, ctx, p, "app")
	deleteWithReleases(t, ctx, p)
	eventually(t, settle, deletionStage(ctx, key, cpv1.UninstallingPlacementReason))
	before := &corev1.Secret{}
	eventually(t, settle, func() error { return k8s.Get(ctx, applierSecretKey(p), before) })

	var bindings admissionv1.ValidatingAdmissionPolicyBindingList
	if err := tenant.Client.List(ctx, &bindings, client.MatchingLabels{cpv1.PlaneUIDLabel: string(p.UID)}); err != nil || len(bindings.Items) == 0 {
		t.Fatalf("no policy bindings of the plane (err=%v)", err)
	}
	drifted := bindings.Items[0]
	if err := tenant.Client.Delete(ctx, &drifted); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		var evs corev1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(p.Namespace)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "Drifted" && strings.Contains(e.Message, drifted.Name) && strings.Contains(e.Message, "uninstall credential is revoked") {
				return nil
			}
		}
		return errors.New("no Drifted event names the binding and the revocation")
	})
	eventually(t, settle, func() error {
		if err := tenant.Client.Get(ctx, types.NamespacedName{Name: drifted.Name}, &admissionv1.ValidatingAdmissionPolicyBinding{}); err != nil {
			return fmt.Errorf("the binding is not restored: %w", err)
		}
		after := &corev1.Secret{}
		if err := k8s.Get(ctx, applierSecretKey(p), after); err != nil {
			return err
		}
		if after.UID == before.UID {
			return errors.New("the credential issued before the drift was never revoked")
		}
		return nil
	})

	uninstalled(t, ctx, hr)
	eventually(t, settle, planeGone(ctx, key))
}

// TestAttackTeardownCredentialOverAnUnverifiedPlane: while the teardown waits for Flux,
// the plane's datastore dies, so nothing of its hardening can be read back. The
// credential the teardown issued must not outlive that: it is revoked while the plane
// cannot be verified, and issued again once it can, so Flux finishes the uninstall.
func TestAttackTeardownCredentialOverAnUnverifiedPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, tenant := readyPlane(t, ctx, newClass("teardown-unverified-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	hr := installedRelease(t, ctx, p, "app")
	deleteWithReleases(t, ctx, p)
	eventually(t, settle, deletionStage(ctx, key, cpv1.UninstallingPlacementReason))
	eventually(t, settle, func() error { return k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}) })

	if err := tenant.StopEtcd(); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the uninstall credential outlived the plane's verification (err=%v)", err)
		}
		return nil
	})
	if err := tenant.StartEtcd(); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error { return k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}) })
	uninstalled(t, ctx, hr)
	eventually(t, settle, planeGone(ctx, key))
}

// TestAttackNeverInstalledReleaseKeepsTheCredential: the applier credential is the
// tenant's to read (Flux needs its Secret in the tenant's namespace), and the teardown
// keeps it valid while Flux has something to uninstall. A tenant creates a placement
// release that can never be installed (a Flux shard no controller serves) and gives it
// Flux's finalizer itself: the teardown kept the credential for the whole
// uninstallTimeout for a release with nothing in the plane. A release never installed
// needs no uninstall: the credential goes at once, and the plane with it.
func TestAttackNeverInstalledReleaseKeepsTheCredential(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("never-installed-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	hr := placementRelease(p.Namespace, "never", func(hr *helmv2.HelmRelease) {
		hr.Labels[cpv1.ShardKeyLabel] = "nobody"
		hr.Finalizers = []string{helmv2.HelmReleaseFinalizer}
	})
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	defer removeFinalizer(t, ctx, hr, helmv2.HelmReleaseFinalizer)

	deleteWithReleases(t, ctx, p)
	// The class's uninstallTimeout is the default 30 minutes: within the suite's settle
	// the credential must be gone for a reason other than the timeout.
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the applier credential is still there for a release that was never installed (err=%v)", err)
		}
		return planeGone(ctx, key)()
	})
}
