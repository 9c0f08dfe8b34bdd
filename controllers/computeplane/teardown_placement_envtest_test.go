package computeplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/test/testkit"
)

// TestTeardownReleasesAFinalizerAddedAfterTheList: the placement controller adds its
// finalizer to a new release a moment after it is created, so the teardown's list can
// hold the release without it while the API server already has it. The release must go
// all the same: a release left with the finalizer, once its plane is gone, would keep
// it (and its namespace) for good.
func TestTeardownReleasesAFinalizerAddedAfterTheList(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := tenantPlane(t, ctx, "late-"+rand.String(6))
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "late",
		Labels:     map[string]string{cpv1.PlacementLabel: cpv1.PlacementLabelValue},
		Finalizers: []string{cpv1.PlacementFinalizer}},
		Spec: helmv2.HelmReleaseSpec{Interval: metav1.Duration{Duration: time.Minute},
			ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "chart"}}}
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	listed := *hr.DeepCopy()
	listed.Finalizers = nil
	// As the operator: the shipped policies let only it remove the placement finalizer.
	operator, err := client.New(mgmt.OperatorConfig, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: operator, APIReader: operator}
	if _, err := r.releasePlacementFinalizers(ctx, []helmv2.HelmRelease{listed}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), &helmv2.HelmRelease{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("release still there (err=%v)", err)
		}
		return nil
	})
}
