package computeplane

import (
	"context"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

// TestAddonWakesOnlyItsInfrastructurePlane: an add-on release wakes the plane whose
// infrastructure namespace holds it, whatever labels it carries. A tenant's release in
// its own namespace, labelled with another tenant's plane name, namespace and uid (the
// add-on cache takes it in by its managed-by label), must wake no plane: mapped by those
// labels it would keep the victim reconciling, and its plane's API server busy.
func TestAddonWakesOnlyItsInfrastructurePlane(t *testing.T) {
	s := runtime.NewScheme()
	utilruntime.Must(cpv1.AddToScheme(s))
	victim := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: "victim", Name: "plane", UID: "victim-uid"}}
	victim.Status.InfrastructureNamespace = "cp-victim-plane"
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(victim)
	for _, ix := range tenancy.Indexes() {
		b = b.WithIndex(&cpv1.ComputePlane{}, ix.Field, func(o client.Object) []string { return ix.Extract(o.(*cpv1.ComputePlane)) })
	}
	r := &Reconciler{Client: b.Build()}
	labels := map[string]string{cpv1.ManagedByLabel: cpv1.ManagedByValue, cpv1.PlaneNameLabel: victim.Name,
		cpv1.PlaneNamespaceLabel: victim.Namespace, cpv1.PlaneUIDLabel: string(victim.UID)}
	for _, tc := range []struct {
		namespace string
		want      int
	}{
		{namespace: "mallory", want: 0},
		{namespace: victim.Namespace, want: 0},
		{namespace: victim.Status.InfrastructureNamespace, want: 1},
	} {
		hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "addon", Labels: labels}}
		if got := r.planesOfAddon(context.Background(), hr); len(got) != tc.want {
			t.Errorf("a release in %s labelled as the victim's add-on wakes %v, want %d plane(s)", tc.namespace, got, tc.want)
		}
	}
}
