package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/kustomize"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// TestAttackAddonCacheFlood: the add-on cache selects HelmReleases by the operator's
// managed-by label, which anyone who may create a HelmRelease can set. A tenant (the
// tenant roles and Flux's aggregated edit) labels releases of its own namespace like
// add-ons, with large values, annotations and post-renderers and another tenant's plane
// labels: the cache must keep a few hundred bytes of each (no values, no annotations, no
// post-renderers, only the operator's label keys), or a few hundred such releases hold
// the manager past its memory limit, and again on every restart while it lists them.
func TestAttackAddonCacheFlood(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	victim := planeWithClass(t, ctx, newClass("victim-"+rand.String(6)))
	tenantNS := tenantNamespace(t, ctx)
	mallory := fluxTenant(t, ctx, tenantNS, "mallory-"+rand.String(4))

	big := strings.Repeat("x", 256<<10)
	hr := &helmv2.HelmRelease{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "fake-addon",
			Labels: map[string]string{cpv1.ManagedByLabel: cpv1.ManagedByValue, cpv1.PlaneNameLabel: victim.Name,
				cpv1.PlaneNamespaceLabel: victim.Namespace, cpv1.PlaneUIDLabel: string(victim.UID), "bulk": strings.Repeat("l", 63)},
			Annotations: map[string]string{"bulk": strings.Repeat("a", 128<<10)}},
		Spec: helmv2.HelmReleaseSpec{Interval: metav1.Duration{Duration: time.Hour}, Suspend: true, ReleaseName: "fake",
			ChartRef:      &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "app"},
			Values:        &apiextensionsv1.JSON{Raw: []byte(`{"blob":"` + big + `"}`)},
			PostRenderers: []helmv2.PostRenderer{{Kustomize: &helmv2.Kustomize{Images: []kustomize.Image{{Name: "a", NewName: strings.Repeat("n", 64<<10)}}}}}},
	}
	if err := mallory.Create(ctx, hr); err != nil {
		t.Fatalf("the tenant could not create the release the attack needs (the test proves nothing): %v", err)
	}
	cached := &helmv2.HelmRelease{}
	eventually(t, settle, func() error {
		return reconciler.Addons.Get(ctx, client.ObjectKeyFromObject(hr), cached)
	})
	if cached.Spec.Values != nil || len(cached.Annotations) > 0 || len(cached.Spec.PostRenderers) > 0 || cached.Spec.ChartRef != nil {
		t.Errorf("the add-on cache keeps what a tenant made large: values %t, %d annotations, %d post-renderers, chartRef %v",
			cached.Spec.Values != nil, len(cached.Annotations), len(cached.Spec.PostRenderers), cached.Spec.ChartRef)
	}
	if _, ok := cached.Labels["bulk"]; ok || cached.Labels[cpv1.ManagedByLabel] != cpv1.ManagedByValue {
		t.Errorf("the add-on cache keeps labels other than the operator's (or lost its own): %v", cached.Labels)
	}
	if cached.Spec.ReleaseName != "fake" {
		t.Errorf("the add-on cache lost the release name the add-on summary reads: %q", cached.Spec.ReleaseName)
	}
}
