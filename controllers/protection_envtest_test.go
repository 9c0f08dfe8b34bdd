package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// ownerUser binds user to computeplane-owner (the parent tenant's role) in namespace.
func ownerUser(t *testing.T, ctx context.Context, namespace, user string) client.Client {
	t.Helper()
	return boundUser(t, ctx, namespace, user, clusterRoles("computeplane-owner"),
		func(c client.Client) error {
			return c.List(ctx, &cpv1.ComputePlaneList{}, client.InNamespace(namespace))
		})
}

// deleteWithReleases is how a plane's owner deletes a plane placement releases still
// run in: asking for them to be uninstalled with it.
func deleteWithReleases(t *testing.T, ctx context.Context, p *cpv1.ComputePlane) {
	t.Helper()
	eventually(t, settle, func() error { return annotate(ctx, k8s, p, cpv1.UninstallAnnotation, "the test is done with it") })
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// TestTenantUsesOwnerTurnsOnAndOff: the capabilities design separates who turns a plane
// on and off (its owner: the parent tenant or the platform) from who uses it (the
// tenant). The tenant-edit role changes the curated knobs and nothing else; it can
// neither create nor delete a plane, nor ask for its releases to be uninstalled.
func TestTenantUsesOwnerTurnsOnAndOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := newClass("owner-" + rand.String(6))
	if err := k8s.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	ns := tenantNamespace(t, ctx)
	alice := tenantUser(t, ctx, ns, "alice")
	parent := ownerUser(t, ctx, ns, "parent")

	p := newPlane(ns, "plane", class.Name, withGroup("workers", medium))
	if err := alice.Create(ctx, p.DeepCopy()); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant created a plane (err=%v)", err)
	}
	if err := parent.Create(ctx, p); err != nil {
		t.Fatalf("the owner could not create the plane: %v", err)
	}

	// The knobs are the tenant's.
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := alice.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		patch := client.MergeFrom(got.DeepCopy())
		g := got.Spec.NodeGroups["workers"]
		g.MaxReplicas = 3
		got.Spec.NodeGroups["workers"] = g
		got.Spec.PlacementNamespaces = []string{"notebooks"}
		return alice.Patch(ctx, got, patch)
	})
	denied(t, annotate(ctx, alice, p, cpv1.UninstallAnnotation, "mine"), "needs update on computeplanes/uninstall")
	if err := alice.Delete(ctx, p); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant deleted the plane (err=%v)", err)
	}
	if err := parent.Delete(ctx, p); err != nil {
		t.Fatalf("the owner could not delete the plane: %v", err)
	}
	eventually(t, settle, planeGone(ctx, client.ObjectKeyFromObject(p)))
}

// bypassPlaneWebhook takes the namespace out of the ComputePlane validating webhook's
// reach until the returned func puts it back: a webhook that is down, or a cluster admin
// who removed it.
func bypassPlaneWebhook(t *testing.T, ctx context.Context, namespace string) func() {
	t.Helper()
	var configs admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := k8s.List(ctx, &configs); err != nil {
		t.Fatal(err)
	}
	for i := range configs.Items {
		cfg := &configs.Items[i]
		for j := range cfg.Webhooks {
			if cfg.Webhooks[j].Name != "vcomputeplane.computeplane.cozystack.io" {
				continue
			}
			before := cfg.Webhooks[j].NamespaceSelector.DeepCopy()
			patch := client.MergeFrom(cfg.DeepCopy())
			cfg.Webhooks[j].NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{namespace}}}}
			if err := k8s.Patch(ctx, cfg, patch); err != nil {
				t.Fatal(err)
			}
			return func() {
				restore := client.MergeFrom(cfg.DeepCopy())
				cfg.Webhooks[j].NamespaceSelector = before
				if err := k8s.Patch(ctx, cfg, restore); err != nil {
					t.Error(err)
				}
			}
		}
	}
	t.Fatal("no vcomputeplane webhook is registered")
	return nil
}

// TestDeletionProtectedByRunningReleases: deletion protection of the capabilities
// design. Deleting a plane that placement releases still run in is refused at
// admission, naming them. A delete that gets past admission holds the plane
// (Reconciling=Protected): nothing is uninstalled, the credential is revoked. Once the
// tenant deletes its releases they are uninstalled and the plane goes; its owner could
// instead have asked for them to be uninstalled with it.
func TestDeletionProtectedByRunningReleases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("protect-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	hr := installedRelease(t, ctx, p, "jupyter")

	denied(t, k8s.Delete(ctx, p), "1 placement release(s) still run in the plane (jupyter)")

	restore := bypassPlaneWebhook(t, ctx, p.Namespace)
	eventually(t, settle, func() error { return k8s.Delete(ctx, p) })
	restore()
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		rec := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReconcilingCondition)
		if rec == nil || rec.Reason != cpv1.ProtectedReason || !strings.Contains(rec.Message, "(jupyter)") || !strings.Contains(rec.Message, cpv1.UninstallAnnotation) {
			return fmt.Errorf("Reconciling = %+v", rec)
		}
		return gateClosed(ctx, p)()
	})
	time.Sleep(3 * time.Second) // a few more passes
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil || !hr.DeletionTimestamp.IsZero() {
		t.Fatalf("a protected plane's release was deleted (err=%v)", err)
	}
	if err := k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a protected plane kept its applier credential (err=%v)", err)
	}

	// The tenant deletes its release: it is uninstalled (with a credential issued for
	// it), and the plane goes.
	if err := k8s.Delete(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, deletionStage(ctx, key, cpv1.UninstallingPlacementReason))
	eventually(t, settle, func() error { return k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}) })
	uninstalled(t, ctx, hr)
	eventually(t, settle, planeGone(ctx, key))
}

// TestOwnerUninstallsReleasesWithThePlane: the owner's annotation lets the plane be
// deleted with its releases; the teardown uninstalls them first.
func TestOwnerUninstallsReleasesWithThePlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("owner-uninstall-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	hr := installedRelease(t, ctx, p, "jupyter")
	parent := ownerUser(t, ctx, p.Namespace, "parent")
	denied(t, parent.Delete(ctx, p), "still run in the plane")
	if err := annotate(ctx, parent, p, cpv1.UninstallAnnotation, "tenant offboarded, ticket 9"); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error { return parent.Delete(ctx, p) })
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
			return err
		}
		if hr.DeletionTimestamp.IsZero() {
			return errors.New("the release is not being deleted")
		}
		return nil
	})
	uninstalled(t, ctx, hr)
	eventually(t, settle, planeGone(ctx, key))
}
