package testkit

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

// The fixtures and checks the suites share (the controllers suite has richer builders of
// its own, controllers/builders_test.go).

// NewTenantPlane creates a tenant namespace ("tenant-<random>") and, in it, the plane
// "plane" of class with the placement namespace "notebooks" and an autoscaled node
// group "workers" (0-2 u1.medium), changed by mut before it is created.
func NewTenantPlane(tb testing.TB, ctx context.Context, c client.Client, class string, mut ...func(*cpv1.ComputePlane)) *cpv1.ComputePlane {
	tb.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-" + rand.String(6)}}
	if err := c.Create(ctx, ns); err != nil {
		tb.Fatal(err)
	}
	p := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "plane"},
		Spec: cpv1.ComputePlaneSpec{ClassName: class, PlacementNamespaces: []string{"notebooks"},
			NodeGroups: map[string]cpv1.NodeGroup{"workers": {MinReplicas: 0, MaxReplicas: 2, InstanceType: "u1.medium"}}}}
	for _, m := range mut {
		m(p)
	}
	if err := c.Create(ctx, p); err != nil {
		tb.Fatal(err)
	}
	return p
}

// ReadyIs checks that the plane's Ready condition has the status, for its current
// generation.
func ReadyIs(ctx context.Context, c client.Client, p *cpv1.ComputePlane, want metav1.ConditionStatus) func() error {
	return func() error {
		got := &cpv1.ComputePlane{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		cond := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReadyCondition)
		if cond == nil || cond.Status != want || cond.ObservedGeneration != got.Generation {
			return fmt.Errorf("Ready is not %s: %+v", want, cond)
		}
		return nil
	}
}

// GateClosed checks what a closed gate is: the plane not Ready and its applier
// credential (the kubeconfig placement releases name) gone.
func GateClosed(ctx context.Context, c client.Client, p *cpv1.ComputePlane) func() error {
	return func() error {
		got := &cpv1.ComputePlane{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		if apimeta.IsStatusConditionTrue(got.Status.Conditions, cpv1.ReadyCondition) {
			return errors.New("Ready is still True")
		}
		return ApplierRevoked(ctx, c, p)()
	}
}

// ApplierRevoked checks that the plane's applier kubeconfig Secret is gone.
func ApplierRevoked(ctx context.Context, c client.Client, p *cpv1.ComputePlane) func() error {
	return func() error {
		err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: tenancy.ApplierSecretName(p)}, &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the applier credential is still issued (err=%v)", err)
		}
		return nil
	}
}
