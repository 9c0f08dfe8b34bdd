package controllers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/placement"
	"github.com/cozystack/computeplane/controllers/tenancy"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

var fluxRolesOnce sync.Once

// fluxTenant is tenantUser with Flux's aggregated namespace roles too, as a tenant bound
// to the built-in edit role holds them on a cluster with Flux: flux-edit and flux-view,
// written from fluxcd/flux2 manifests/rbac/edit.yaml and view.yaml (every resource of
// the Flux groups, subresources such as helmreleases/status included).
func fluxTenant(t *testing.T, ctx context.Context, namespace, user string) client.Client {
	t.Helper()
	groups := []string{"notification.toolkit.fluxcd.io", "source.toolkit.fluxcd.io", "source.extensions.fluxcd.io",
		"helm.toolkit.fluxcd.io", "image.toolkit.fluxcd.io", "kustomize.toolkit.fluxcd.io"}
	roles := map[string][]string{
		"flux-edit": {"create", "delete", "deletecollection", "patch", "update"},
		"flux-view": {"get", "list", "watch"},
	}
	fluxRolesOnce.Do(func() {
		for name, verbs := range roles {
			cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
				Rules: []rbacv1.PolicyRule{{APIGroups: groups, Resources: []string{"*"}, Verbs: verbs}}}
			if err := k8s.Create(ctx, cr); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	})
	c := boundUser(t, ctx, namespace, user, clusterRoles("flux-edit", "flux-view"),
		func(c client.Client) error {
			return c.List(ctx, &helmv2.HelmReleaseList{}, client.InNamespace(namespace))
		})
	tenantUser(t, ctx, namespace, user)
	return c
}

// kustomization is a Flux Kustomization as unstructured (its Go types are not a
// dependency), with spec fields set over a valid minimum.
func kustomization(ns, name string, spec map[string]any) *unstructured.Unstructured {
	s := map[string]any{"interval": "1m", "prune": true, "sourceRef": map[string]any{"kind": "GitRepository", "name": "repo"}}
	for k, v := range spec {
		s[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": s}}
	u.SetAPIVersion("kustomize.toolkit.fluxcd.io/v1")
	u.SetKind("Kustomization")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// TestAttackFluxObjectsNameThePlanesCredential: a tenant with Flux's edit rights names its
// plane's applier kubeconfig outside the routing the operator writes. Each was accepted
// before every HelmRelease and Kustomization was judged: an unlabelled release routed by
// hand (applied into the plane unheld, uncounted, orphaned when deleted while the gate is
// closed), valuesFrom copying the credential into the plane's untrusted workload, a
// Kustomization applying with it or substituting it into what it applies.
func TestAttackFluxObjectsNameThePlanesCredential(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("creds-"+rand.String(6)))
	ns := p.Namespace
	secret := tenancy.ApplierSecretName(p)
	tenant := fluxTenant(t, ctx, ns, "mallory")
	applier := &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: secret, Key: "value"}}
	fromCredential := []helmv2.ValuesReference{{Kind: "Secret", Name: secret, ValuesKey: "value"}}
	unlabelled := func(name string, opts ...releaseOpt) *helmv2.HelmRelease {
		return placementRelease(ns, name, append([]releaseOpt{func(hr *helmv2.HelmRelease) { hr.Labels = nil }}, opts...)...)
	}

	denied(t, tenant.Create(ctx, unlabelled("by-hand", func(hr *helmv2.HelmRelease) {
		hr.Spec.KubeConfig, hr.Spec.ServiceAccountName = applier, "computeplane-deployer"
	})), "spec.kubeConfig.secretRef.name: Forbidden: names ComputePlane plane's applier kubeconfig: only a placement release is applied with it, routed and held by the operator; label this release computeplane.cozystack.io/placement=ComputePlane")
	denied(t, tenant.Create(ctx, placementRelease(ns, "copy", func(hr *helmv2.HelmRelease) { hr.Spec.ValuesFrom = fromCredential })),
		"spec.valuesFrom[0].name: Forbidden: names ComputePlane plane's applier kubeconfig: the plane's credential never feeds a chart's values")
	denied(t, tenant.Create(ctx, unlabelled("copy-local", func(hr *helmv2.HelmRelease) { hr.Spec.ValuesFrom = fromCredential })),
		"spec.valuesFrom[0].name: Forbidden")
	denied(t, tenant.Create(ctx, kustomization(ns, "by-hand", map[string]any{
		"kubeConfig": map[string]any{"secretRef": map[string]any{"name": secret, "key": "value"}}})),
		"spec.kubeConfig.secretRef.name: Forbidden: names ComputePlane plane's applier kubeconfig: the plane's credential may be named only as a placement HelmRelease's spec.kubeConfig")
	denied(t, tenant.Create(ctx, kustomization(ns, "substitute", map[string]any{
		"postBuild": map[string]any{"substituteFrom": []any{map[string]any{"kind": "Secret", "name": secret}}}})),
		"spec.postBuild.substituteFrom[0].name: Forbidden")

	// Named later, by an update.
	late := unlabelled("late")
	if err := tenant.Create(ctx, late); err != nil {
		t.Fatalf("a release naming no credential was refused: %v", err)
	}
	patch := client.MergeFrom(late.DeepCopy())
	late.Spec.KubeConfig = applier
	denied(t, tenant.Patch(ctx, late, patch), "only a placement release is applied with it")

	// What is not the credential stays the tenant's business.
	if err := tenant.Create(ctx, unlabelled("own-values", func(hr *helmv2.HelmRelease) {
		hr.Spec.ValuesFrom = []helmv2.ValuesReference{{Kind: "Secret", Name: "app-values"}}
	})); err != nil {
		t.Errorf("a release with the tenant's own values Secret was refused: %v", err)
	}
	elsewhere := tenantNamespace(t, ctx)
	if err := k8s.Create(ctx, placementRelease(elsewhere, "unrelated", func(hr *helmv2.HelmRelease) {
		hr.Labels = nil
		hr.Spec.KubeConfig = &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "edge-applier-kubeconfig", Key: "value"}}
	})); err != nil {
		t.Errorf("a release in a namespace without a plane was refused for a name like a credential: %v", err)
	}
}

// TestAttackCredentialNamedBeforeThePlane: the same releases, created before the plane
// exists (nothing to judge them against yet), would be applied with its credential the
// moment it is issued. The plane is refused while one names the credential it would get.
func TestAttackCredentialNamedBeforeThePlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := newClass("before-" + rand.String(6))
	if err := k8s.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	ns := tenantNamespace(t, ctx)
	tenant := fluxTenant(t, ctx, ns, "mallory")
	early := placementRelease(ns, "early", func(hr *helmv2.HelmRelease) {
		hr.Labels = nil
		hr.Spec.KubeConfig = &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "plane-applier-kubeconfig", Key: "value"}}
		hr.Spec.ServiceAccountName = "computeplane-deployer"
	})
	if err := tenant.Create(ctx, early); err != nil {
		t.Fatal(err)
	}
	// The plane's owner (the parent tenant) then turns the plane on.
	parent := ownerUser(t, ctx, ns, "parent")
	denied(t, parent.Create(ctx, newPlane(ns, "plane", class.Name)),
		"HelmRelease "+ns+"/early already names plane-applier-kubeconfig, the applier kubeconfig this ComputePlane would get (spec.kubeConfig.secretRef.name)")
	if err := tenant.Delete(ctx, early); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error { return parent.Create(ctx, newPlane(ns, "plane", class.Name)) })
}

// TestAttackChartSourcesOfOtherTenants: Flux fetches a chart with its source's namespace's
// credentials (a HelmChart built from spec.chart is created in the source's namespace),
// so a placement release naming another tenant's source installs that tenant's private
// chart into this plane. Only the release's own namespace and those its class lists are
// allowed.
func TestAttackChartSourcesOfOtherTenants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	public := "public-" + rand.String(6)
	p := planeWithClass(t, ctx, newClass("sources-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.PlacementReleases.SourceNamespaces = []string{public}
	}))
	ns := p.Namespace
	victim := tenantNamespace(t, ctx)
	tenant := fluxTenant(t, ctx, ns, "mallory")

	denied(t, tenant.Create(ctx, placementRelease(ns, "oci", func(hr *helmv2.HelmRelease) {
		hr.Spec.ChartRef = &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "private", Namespace: victim}
	})), fmt.Sprintf(`spec.chartRef.namespace: Unsupported value: %q: supported values: %q, %q`, victim, ns, public))
	denied(t, tenant.Create(ctx, placementRelease(ns, "repo", func(hr *helmv2.HelmRelease) {
		hr.Spec.ChartRef = nil
		hr.Spec.Chart = &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{Chart: "app",
			SourceRef: helmv2.CrossNamespaceObjectReference{Kind: "HelmRepository", Name: "private", Namespace: victim}}}
	})), fmt.Sprintf(`spec.chart.spec.sourceRef.namespace: Unsupported value: %q`, victim))
	denied(t, tenant.Create(ctx, placementRelease(ns, "after", func(hr *helmv2.HelmRelease) {
		hr.Spec.DependsOn = []helmv2.DependencyReference{{Name: "db", Namespace: victim}}
	})), fmt.Sprintf(`spec.dependsOn[0].namespace: Unsupported value: %q: supported values: %q`, victim, ns))

	for name, source := range map[string]string{"own": "", "catalogue": public} {
		if err := tenant.Create(ctx, placementRelease(ns, name, func(hr *helmv2.HelmRelease) {
			hr.Spec.ChartRef = &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "app", Namespace: source}
		})); err != nil {
			t.Errorf("a release from %s namespace was refused: %v", name, err)
		}
	}
}

// TestPlacementSourceTakenAwayIsSuspended: a platform operator removes a source namespace
// from the class; a release already using it is suspended (Flux applies nothing of it),
// reported, and cannot be resumed by its tenant until the class allows it again, when the
// operator resumes it.
func TestPlacementSourceTakenAwayIsSuspended(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	public := "public-" + rand.String(6)
	class := newClass("taken-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.PlacementReleases.SourceNamespaces = []string{public}
	})
	p := planeWithClass(t, ctx, class)
	tenant := fluxTenant(t, ctx, p.Namespace, "mallory")
	hr := placementRelease(p.Namespace, "app", func(hr *helmv2.HelmRelease) {
		hr.Spec.ChartRef = &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "app", Namespace: public}
	})
	if err := tenant.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	setSources := func(sources []string) {
		t.Helper()
		eventually(t, settle, func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), class); err != nil {
				return err
			}
			class.Spec.PlacementReleases.SourceNamespaces = sources
			return k8s.Update(ctx, class)
		})
	}
	suspended := func(want bool) func() error {
		return func() error {
			got := &helmv2.HelmRelease{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), got); err != nil {
				return err
			}
			if got.Spec.Suspend != want || (got.Annotations[cpv1.SuspendedAnnotation] != "") != want {
				return fmt.Errorf("suspend %v, annotation %q; want suspended %v", got.Spec.Suspend, got.Annotations[cpv1.SuspendedAnnotation], want)
			}
			return nil
		}
	}

	setSources(nil)
	eventually(t, settle, suspended(true))
	eventually(t, settle, releaseEvent(ctx, hr, placement.NotRoutedReason, "spec.chartRef.namespace: Unsupported value"))
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(hr.DeepCopy())
	hr.Spec.Suspend = false
	denied(t, tenant.Patch(ctx, hr, patch), "spec.chartRef.namespace: Unsupported value")

	setSources([]string{public})
	eventually(t, settle, suspended(false))
}

// TestAttackTenantBlanksPlacementStatus: the placement finalizer goes once Flux reports
// the release uninstalled (status.storageNamespace cleared). Flux's edit role lets a
// tenant write the status subresource: suspend, blank it, delete, and the workload would
// stay in the plane, owned by nothing. Only Flux (and administrators) write it.
func TestAttackTenantBlanksPlacementStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("status-"+rand.String(6)))
	tenant := fluxTenant(t, ctx, p.Namespace, "mallory")
	hr := placementRelease(p.Namespace, "installed")
	if err := tenant.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	hr.Status.StorageNamespace = p.Namespace // as Flux records an install
	if err := k8s.Status().Update(ctx, hr); err != nil {
		t.Fatal(err)
	}

	if err := tenant.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
		t.Fatal(err)
	}
	hr.Status.StorageNamespace = ""
	denied(t, tenant.Status().Update(ctx, hr), "the status of a placement release is Flux's")
	if err := tenant.Delete(ctx, hr); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
		t.Fatalf("the release went before Flux uninstalled it: %v", err)
	}
	if hr.Status.StorageNamespace != p.Namespace {
		t.Errorf("storageNamespace = %q", hr.Status.StorageNamespace)
	}

	// Unlabelled releases' status is not the operator's business.
	other := placementRelease(p.Namespace, "local", func(hr *helmv2.HelmRelease) { hr.Labels = nil })
	if err := tenant.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	other.Status.StorageNamespace = "x"
	if err := tenant.Status().Update(ctx, other); err != nil {
		t.Errorf("the status of an unlabelled release was refused: %v", err)
	}

	// Flux clears it: the release goes.
	hr.Status.StorageNamespace = ""
	if err := k8s.Status().Update(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, releaseGone(ctx, hr))
}

// TestAttackTenantFloodsPlacementReleases: every placement release is one more for Flux to
// reconcile and the operator to watch; a tenant creating them without end would load the
// management cluster for everyone. The class bounds them per plane.
func TestAttackTenantFloodsPlacementReleases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("flood-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.PlacementReleases.MaxReleases = 3
	}))
	tenant := fluxTenant(t, ctx, p.Namespace, "mallory")
	for i := range 3 {
		if err := tenant.Create(ctx, placementRelease(p.Namespace, fmt.Sprintf("app-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// The count comes from the manager's cache: let it see the three.
	eventually(t, settle, func() error {
		var l helmv2.HelmReleaseList
		if err := reconciler.Client.List(ctx, &l, client.InNamespace(p.Namespace)); err != nil || len(l.Items) != 3 {
			return fmt.Errorf("the cache holds %d releases (err=%v)", len(l.Items), err)
		}
		return nil
	})
	denied(t, tenant.Create(ctx, placementRelease(p.Namespace, "one-more")),
		"ComputePlane plane already has 3 placement releases, the most its ComputePlaneClass "+p.Spec.ClassName+" allows (spec.placementReleases.maxReleases)")
	// Unlabelled releases are not the plane's.
	if err := tenant.Create(ctx, placementRelease(p.Namespace, "local", func(hr *helmv2.HelmRelease) { hr.Labels = nil })); err != nil {
		t.Errorf("an unlabelled release was counted: %v", err)
	}
}
