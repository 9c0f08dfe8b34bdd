package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/tenancy"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

const kindLabel = "apps.example.com/kind"

// applicationRelease is a HelmRelease as a platform renders one application of a kind:
// its kind label, and nothing of placement.
func applicationRelease(ns, name, kind string) *helmv2.HelmRelease {
	return placementRelease(ns, name, func(hr *helmv2.HelmRelease) { hr.Labels = map[string]string{kindLabel: kind} })
}

// TestPlacementByApplicationKind: a class declares which application kinds are placed
// (spec.placementReleases.selector). A release of such a kind is labelled and routed into
// its namespace's plane at admission, with no placement label of its own; a release of
// another kind is left alone; one of a placed kind in a namespace the class allows but
// that has no plane is refused, never applied to the management cluster.
func TestPlacementByApplicationKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := newClass("appkind-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.PlacementReleases.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{kindLabel: "notebook-" + c.Name}}
	})
	p := planeWithClass(t, ctx, class)
	kind := "notebook-" + class.Name

	hr := applicationRelease(p.Namespace, "jupyter", kind)
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	kc := hr.Spec.KubeConfig
	if hr.Labels[cpv1.PlacementLabel] != cpv1.PlacementLabelValue || kc == nil || kc.SecretRef == nil ||
		kc.SecretRef.Name != tenancy.ApplierSecretName(p) || hr.Spec.ServiceAccountName != "computeplane-deployer" ||
		!controllerutil.ContainsFinalizer(hr, cpv1.PlacementFinalizer) {
		t.Errorf("a release of a placed kind is not stored as a routed placement release: labels %v, kubeConfig %+v, serviceAccountName %q, finalizers %v",
			hr.Labels, kc, hr.Spec.ServiceAccountName, hr.Finalizers)
	}

	other := applicationRelease(p.Namespace, "postgres", "database")
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if other.Labels[cpv1.PlacementLabel] != "" || other.Spec.KubeConfig != nil || len(other.Finalizers) != 0 {
		t.Errorf("a release of another kind was changed: labels %v, kubeConfig %+v, finalizers %v", other.Labels, other.Spec.KubeConfig, other.Finalizers)
	}

	// A kind placed by another class does not make this plane's release a placement one.
	foreign := applicationRelease(p.Namespace, "elsewhere", "notebook-some-other-class")
	if err := k8s.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if foreign.Labels[cpv1.PlacementLabel] != "" {
		t.Errorf("a kind the plane's class does not place was labelled: %v", foreign.Labels)
	}

	planeless := tenantNamespace(t, ctx)
	denied(t, k8s.Create(ctx, applicationRelease(planeless, "jupyter", kind)), "has no ComputePlane")

	// The operator's own releases (add-ons, in the plane's infrastructure namespace,
	// marked with its UID) are never placed.
	eventually(t, settle, func() error {
		return k8s.Get(ctx, client.ObjectKey{Name: infraOf(p)}, &corev1.Namespace{})
	})
	eventually(t, settle, func() error {
		// The webhook knows the namespace as the plane's once its status says so.
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		if got.Status.InfrastructureNamespace != infraOf(p) {
			return fmt.Errorf("infrastructure namespace %q", got.Status.InfrastructureNamespace)
		}
		return nil
	})
	eventually(t, settle, func() error {
		addon := applicationRelease(infraOf(p), "addon", kind)
		addon.Labels[cpv1.PlaneUIDLabel] = string(p.UID)
		if err := k8s.Create(ctx, addon, client.DryRunAll); err != nil {
			return err
		}
		if addon.Labels[cpv1.PlacementLabel] != "" {
			return fmt.Errorf("an operator-owned release was made a placement release: %v", addon.Labels)
		}
		return nil
	})
}

// TestAttackForgedUIDLabelEscapesPlacement: the exemption for the operator's own
// add-ons was the plane uid label alone, which a tenant sets on its own releases. A
// release of a kind the class places, carrying its plane's uid, was stored unlabelled and
// unrouted: untrusted code the platform declared placed, applied to the management
// cluster. The label exempts only in that plane's infrastructure namespace.
func TestAttackForgedUIDLabelEscapesPlacement(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := newClass("forged-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.PlacementReleases.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{kindLabel: "notebook-" + c.Name}}
	})
	p := planeWithClass(t, ctx, class)
	mallory := fluxTenant(t, ctx, p.Namespace, "mallory-"+rand.String(4))
	forged := applicationRelease(p.Namespace, "forged", "notebook-"+class.Name)
	forged.Labels[cpv1.PlaneUIDLabel] = string(p.UID)
	if err := mallory.Create(ctx, forged); err != nil {
		t.Fatalf("the tenant could not create the release (the test proves nothing): %v", err)
	}
	if forged.Labels[cpv1.PlacementLabel] != cpv1.PlacementLabelValue || forged.Spec.KubeConfig == nil ||
		forged.Spec.KubeConfig.SecretRef.Name != tenancy.ApplierSecretName(p) {
		t.Errorf("a release of a placed kind with a forged uid label was stored unrouted: labels %v, kubeConfig %+v", forged.Labels, forged.Spec.KubeConfig)
	}
}
