package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/placement"
	"github.com/cozystack/computeplane/controllers/tenancy"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/internal/devenv"
)

type releaseOpt func(*helmv2.HelmRelease)

// placementRelease is a placement release of a chart, as an app chart would render it
// (routing left to the operator unless opts set it).
func placementRelease(ns, name string, opts ...releaseOpt) *helmv2.HelmRelease {
	hr := &helmv2.HelmRelease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{cpv1.PlacementLabel: cpv1.PlacementLabelValue}},
		Spec: helmv2.HelmReleaseSpec{
			Interval: metav1.Duration{Duration: time.Minute},
			ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "app"},
		},
	}
	for _, o := range opts {
		o(hr)
	}
	return hr
}

// TestPlacementRoutedAtAdmission: a placement release is stored routed into its
// namespace's plane, with the placement finalizer; what a chart may choose (a placement
// namespace, values) stays; a release without the label is not touched.
func TestPlacementRoutedAtAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("route-"+rand.String(6)), func(p *cpv1.ComputePlane) { p.Spec.PlacementNamespaces = []string{"notebooks"} })

	hr := placementRelease(p.Namespace, "app")
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	kc := hr.Spec.KubeConfig
	if kc == nil || kc.SecretRef == nil || kc.SecretRef.Name != tenancy.ApplierSecretName(p) || kc.SecretRef.Key != "value" ||
		hr.Spec.ServiceAccountName != "computeplane-deployer" || hr.Spec.TargetNamespace != p.Namespace ||
		hr.Spec.StorageNamespace != p.Namespace || hr.Spec.Install == nil || hr.Spec.Install.CreateNamespace ||
		!controllerutil.ContainsFinalizer(hr, cpv1.PlacementFinalizer) {
		t.Errorf("stored release is not routed: kubeConfig %+v, serviceAccountName %q, target %q, storage %q, install %+v, finalizers %v",
			kc, hr.Spec.ServiceAccountName, hr.Spec.TargetNamespace, hr.Spec.StorageNamespace, hr.Spec.Install, hr.Finalizers)
	}

	chosen := placementRelease(p.Namespace, "notebook", func(hr *helmv2.HelmRelease) { hr.Spec.TargetNamespace = "notebooks" })
	if err := k8s.Create(ctx, chosen); err != nil {
		t.Fatalf("a release targeting one of the plane's placement namespaces was refused: %v", err)
	}
	if chosen.Spec.TargetNamespace != "notebooks" {
		t.Errorf("target namespace = %q, want the one the release chose", chosen.Spec.TargetNamespace)
	}

	local := placementRelease(p.Namespace, "local", func(hr *helmv2.HelmRelease) { hr.Labels = nil })
	if err := k8s.Create(ctx, local); err != nil {
		t.Fatal(err)
	}
	if local.Spec.KubeConfig != nil || len(local.Finalizers) != 0 {
		t.Errorf("a release without the placement label was changed: %+v %v", local.Spec.KubeConfig, local.Finalizers)
	}
}

// TestPlacementRefusals: every way a tenant could route a placement release elsewhere,
// or as someone else, is refused at admission with a message that says what is allowed.
func TestPlacementRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("refuse-"+rand.String(6)), func(p *cpv1.ComputePlane) { p.Spec.PlacementNamespaces = []string{"notebooks"} })
	ns := p.Namespace
	secret := tenancy.ApplierSecretName(p)
	cases := []struct {
		name string
		hr   *helmv2.HelmRelease
		want string
	}{
		{"another kubeconfig", placementRelease(ns, "a", func(hr *helmv2.HelmRelease) {
			hr.Spec.KubeConfig = &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "admin-kubeconfig", Key: "value"}}
		}), "spec.kubeConfig: Invalid value"},
		{"another key", placementRelease(ns, "a", func(hr *helmv2.HelmRelease) {
			hr.Spec.KubeConfig = &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: secret, Key: "admin"}}
		}), "must be {secretRef: {name: " + secret + ", key: value}}"},
		{"another identity", placementRelease(ns, "a", func(hr *helmv2.HelmRelease) { hr.Spec.ServiceAccountName = "default" }),
			`spec.serviceAccountName: Unsupported value: "default": supported values: "computeplane-deployer"`},
		{"another target namespace", placementRelease(ns, "a", func(hr *helmv2.HelmRelease) { hr.Spec.TargetNamespace = "kube-system" }),
			fmt.Sprintf(`spec.targetNamespace: Unsupported value: "kube-system": supported values: "notebooks", "%s"`, ns)},
		{"another storage namespace", placementRelease(ns, "a", func(hr *helmv2.HelmRelease) { hr.Spec.StorageNamespace = "kube-system" }),
			`spec.storageNamespace: Unsupported value: "kube-system"`},
		{"creating namespaces", placementRelease(ns, "a", func(hr *helmv2.HelmRelease) { hr.Spec.Install = &helmv2.Install{CreateNamespace: true} }),
			"spec.install.createNamespace: Forbidden"},
		{"post-renderers", placementRelease(ns, "a", func(hr *helmv2.HelmRelease) {
			hr.Spec.PostRenderers = []helmv2.PostRenderer{{Kustomize: &helmv2.Kustomize{}}}
		}), "spec.postRenderers: Forbidden"},
		{"no plane in the namespace", placementRelease(tenantNamespace(t, ctx), "a"),
			"has no ComputePlane: a placement release runs only on the ComputePlane of its own namespace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			denied(t, k8s.Create(ctx, tc.hr), tc.want)
		})
	}

	// A kubeConfig field this build's Flux API does not know (workload identity) is
	// seen all the same: admission judges the JSON, not Go types.
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
		"metadata": map[string]any{"namespace": ns, "name": "wi", "labels": map[string]any{cpv1.PlacementLabel: cpv1.PlacementLabelValue}},
		"spec": map[string]any{"interval": "1m", "chartRef": map[string]any{"kind": "OCIRepository", "name": "app"},
			"kubeConfig": map[string]any{"configMapRef": map[string]any{"name": "management"}}},
	}}
	denied(t, k8s.Create(ctx, u), "spec.kubeConfig: Invalid value")

	// The label cannot be taken off (the release would then be applied elsewhere), and
	// routing cannot be changed later.
	hr := placementRelease(ns, "keep")
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	off := hr.DeepCopy()
	off.Labels = nil
	denied(t, k8s.Update(ctx, off), "label cannot be removed from a placement release")
	moved := hr.DeepCopy()
	moved.Spec.TargetNamespace = "default"
	denied(t, k8s.Update(ctx, moved), "spec.targetNamespace: Unsupported value")
	// Stripping the finalizer does not take: admission puts it back (and the guard in
	// config/policies refuses its removal should the webhook not run).
	stripped := hr.DeepCopy()
	stripped.Finalizers = nil
	if err := k8s.Update(ctx, stripped); err != nil && !strings.Contains(err.Error(), "finalizer is removed by the operator once") {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), stripped); err != nil || !controllerutil.ContainsFinalizer(stripped, cpv1.PlacementFinalizer) {
		t.Errorf("the placement finalizer was stripped (err=%v): %v", err, stripped.Finalizers)
	}

	// A plane being deleted takes no new releases (held here by a finalizer of the
	// test's, so that it stays in deletion).
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	hold := client.MergeFrom(p.DeepCopy())
	controllerutil.AddFinalizer(p, "example.com/hold")
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, cpv1.UninstallAnnotation, "releases run in it; the test is done with it")
	if err := k8s.Patch(ctx, p, hold); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	denied(t, k8s.Create(ctx, placementRelease(ns, "late")), "is being deleted; it takes no new placement releases")
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	release := client.MergeFrom(p.DeepCopy())
	controllerutil.RemoveFinalizer(p, "example.com/hold")
	if err := k8s.Patch(ctx, p, release); err != nil {
		t.Fatal(err)
	}
}

// TestPlacementNeverStoredUnrouted creates placement releases concurrently while a
// watcher (what Flux sees) checks every version stored: not one lacks the routing.
func TestPlacementNeverStoredUnrouted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("race-"+rand.String(6)))
	w, err := mustWatchClient(t).Watch(ctx, &helmv2.HelmReleaseList{}, client.InNamespace(p.Namespace))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := k8s.Create(ctx, placementRelease(p.Namespace, fmt.Sprintf("app-%d", i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case ev := <-w.ResultChan():
			hr, ok := ev.Object.(*helmv2.HelmRelease)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			seen[hr.Name] = true
			if kc := hr.Spec.KubeConfig; kc == nil || kc.SecretRef == nil || kc.SecretRef.Name != tenancy.ApplierSecretName(p) ||
				hr.Spec.ServiceAccountName == "" || hr.Spec.TargetNamespace == "" {
				t.Errorf("%s event for %s without routing: %+v", ev.Type, hr.Name, hr.Spec)
			}
		case <-ctx.Done():
			t.Fatalf("saw %d of %d releases", len(seen), n)
		}
	}
}

// TestPlacementHeldThenRouted: releases of a plane that is not Ready are held, visibly
// (an event on each, counts and PlacementOpen on the plane); once it is Ready they are
// routed, with no write to the releases (the gate is the credential).
func TestPlacementHeldThenRouted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tenant, err := devenv.StartTenant(k8s.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	p := planeWithClass(t, ctx, newClass("held-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	hr := placementRelease(p.Namespace, "app")
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, placementIs(ctx, key, metav1.ConditionFalse, cpv1.HeldReason, cpv1.PlacementCounts{Held: 1}))
	eventually(t, settle, releaseEvent(ctx, hr, placement.HeldReason, "Flux applies it into the plane as soon as the plane is Ready"))
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
		t.Fatal(err)
	}
	rv := hr.ResourceVersion

	provideWithTenant(t, ctx, p, tenant)
	eventually(t, settle, placementIs(ctx, key, metav1.ConditionTrue, cpv1.RoutedReason, cpv1.PlacementCounts{Routed: 1}))
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
		t.Fatal(err)
	}
	if hr.ResourceVersion != rv {
		t.Error("opening the gate wrote to the release; the gate is the credential alone")
	}
}

// TestPlacementDeletionWaitsForUninstall: a deleted placement release stays until Flux
// has uninstalled it (it clears status.storageNamespace); a suspended one is resumed so
// that Flux does uninstall it; one never installed goes at once. Flux's part is played
// here by writing its status; the e2e suite runs the real helm-controller.
func TestPlacementDeletionWaitsForUninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("uninstall-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)

	never := placementRelease(p.Namespace, "never")
	installed := placementRelease(p.Namespace, "installed")
	suspended := placementRelease(p.Namespace, "suspended", func(hr *helmv2.HelmRelease) { hr.Spec.Suspend = true })
	for _, hr := range []*helmv2.HelmRelease{never, installed, suspended} {
		if err := k8s.Create(ctx, hr); err != nil {
			t.Fatal(err)
		}
	}
	for _, hr := range []*helmv2.HelmRelease{installed, suspended} {
		hr.Status.StorageNamespace = p.Namespace // as Flux records an install
		if err := k8s.Status().Update(ctx, hr); err != nil {
			t.Fatal(err)
		}
	}
	for _, hr := range []*helmv2.HelmRelease{never, installed, suspended} {
		if err := k8s.Delete(ctx, hr); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, settle, releaseGone(ctx, never))
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(suspended), suspended); err != nil {
			return err
		}
		if suspended.Spec.Suspend {
			return errors.New("a deleted suspended release is still suspended: Flux would skip its uninstall")
		}
		return nil
	})
	eventually(t, settle, placementIs(ctx, key, metav1.ConditionFalse, cpv1.HeldReason, cpv1.PlacementCounts{Uninstalling: 2}))
	eventually(t, settle, releaseEvent(ctx, installed, placement.UninstallHeldReason, "its objects keep running in the plane until the plane is Ready again"))
	time.Sleep(time.Second)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(installed), installed); err != nil {
		t.Fatalf("a deleted release went before it was uninstalled: %v", err)
	}

	// Flux uninstalls (and clears storageNamespace): the release goes.
	for _, hr := range []*helmv2.HelmRelease{installed, suspended} {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
			t.Fatal(err)
		}
		hr.Status.StorageNamespace = ""
		if err := k8s.Status().Update(ctx, hr); err != nil {
			t.Fatal(err)
		}
		eventually(t, settle, releaseGone(ctx, hr))
	}
}

func releaseGone(ctx context.Context, hr *helmv2.HelmRelease) func() error {
	return func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), &helmv2.HelmRelease{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("release %s still present (err=%v)", hr.Name, err)
		}
		return nil
	}
}

// placementIs checks the plane's PlacementOpen condition and counts.
func placementIs(ctx context.Context, key client.ObjectKey, s metav1.ConditionStatus, reason string, counts cpv1.PlacementCounts) func() error {
	return func() error {
		p := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, p); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(p.Status.Conditions, cpv1.PlacementOpenCondition)
		if c == nil || c.Status != s || c.Reason != reason {
			return fmt.Errorf("PlacementOpen = %+v, want %s/%s", c, s, reason)
		}
		if p.Status.Placement == nil || *p.Status.Placement != counts {
			return fmt.Errorf("status.placement = %+v, want %+v", p.Status.Placement, counts)
		}
		return nil
	}
}

// releaseEvent checks that an event of reason, containing text, was recorded on hr.
func releaseEvent(ctx context.Context, hr *helmv2.HelmRelease, reason, text string) func() error {
	return func() error {
		var evs corev1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(hr.Namespace)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == hr.Name && e.InvolvedObject.Kind == "HelmRelease" && e.Reason == reason && strings.Contains(e.Message, text) {
				return nil
			}
		}
		return fmt.Errorf("no %s event on HelmRelease %s containing %q", reason, hr.Name, text)
	}
}

// TestPlacementReleaseOutlivesItsPlane: a plane that goes without the operator's
// teardown (deleted before the operator added its finalizer: here its finalizer is taken
// off, with the operator's identity as only it may, just before it is deleted) leaves an
// installed placement release with the placement finalizer. Nothing can uninstall it any
// more, so once deleted it is let go (with a warning) instead of keeping its namespace
// forever.
func TestPlacementReleaseOutlivesItsPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("outlived-"+rand.String(6)))
	installed := placementRelease(p.Namespace, "installed")
	if err := k8s.Create(ctx, installed); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(installed), installed); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(installed, cpv1.PlacementFinalizer) {
			return errors.New("no placement finalizer yet")
		}
		return nil
	})
	installed.Status.StorageNamespace = p.Namespace // as Flux records an install
	if err := k8s.Status().Update(ctx, installed); err != nil {
		t.Fatal(err)
	}

	// The plane goes without a teardown: its finalizers are replaced by one of the
	// test's (by the operator's identity: the finalizer guard lets no one else), and it
	// is deleted at exactly that version (the operator, which puts its own back, makes
	// the delete conflict and the step run again).
	// Its owner lets it go with the release running (else the delete is refused).
	eventually(t, settle, func() error { return annotate(ctx, k8s, p, cpv1.UninstallAnnotation, "the test removes it by hand") })
	const hold = "test.computeplane.cozystack.io/hold"
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		patch := client.MergeFromWithOptions(got.DeepCopy(), client.MergeFromWithOptimisticLock{})
		got.Finalizers = []string{hold}
		if err := reconciler.Client.Patch(ctx, got, patch); err != nil {
			return err
		}
		return k8s.Delete(ctx, got, client.Preconditions{ResourceVersion: &got.ResourceVersion})
	})
	got := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatal(err)
	}
	if controllerutil.ContainsFinalizer(got, cpv1.ComputePlaneFinalizer) {
		t.Fatalf("the plane being deleted has the operator's finalizer (%v): its teardown would run", got.Finalizers)
	}
	// The test's finalizer goes (retried: the operator may still write the plane's status).
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		if len(got.Finalizers) > 0 {
			got.Finalizers = nil
			if err := k8s.Update(ctx, got); err != nil {
				return err
			}
		}
		return errors.New("the plane is still there")
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(installed), installed); err != nil || installed.DeletionTimestamp != nil {
		t.Fatalf("the release was touched by a teardown that should not have run (err=%v, deleting=%v)", err, installed.DeletionTimestamp)
	}

	if err := k8s.Delete(ctx, installed); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, releaseGone(ctx, installed))
	eventually(t, settle, releaseEvent(ctx, installed, placement.NothingToUninstallReason, "no plane is left for Flux to uninstall it from"))
}
