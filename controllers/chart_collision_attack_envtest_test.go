package controllers_test

import (
	"context"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// TestAttackChartCollision: Flux names the HelmChart of a release's chart template
// <namespace>-<name>, in the source's namespace. Two tenants using one shared catalogue
// (a/b-x and a-b/x: Cozystack's nested tenants are named like that) get one HelmChart:
// the second reads, pins (its version) or deletes the first's chart. The release that
// would collide is refused, naming the other.
func TestAttackChartCollision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := "hc-" + rand.String(5)
	ab := a + "-b"
	for _, ns := range []string{a, ab} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	victim := fluxTenant(t, ctx, a, "victim-"+rand.String(4))
	mallory := fluxTenant(t, ctx, ab, "mallory-"+rand.String(4))
	release := func(ns, name string) *helmv2.HelmRelease {
		return &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: helmv2.HelmReleaseSpec{Interval: metav1.Duration{Duration: time.Hour},
				Chart: &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{Chart: "app",
					SourceRef: helmv2.CrossNamespaceObjectReference{Kind: "HelmRepository", Name: "catalogue", Namespace: "cozy-public"}}}}}
	}
	if err := victim.Create(ctx, release(a, "b-x")); err != nil {
		t.Fatalf("the victim's release: %v", err)
	}
	denied(t, mallory.Create(ctx, release(ab, "x")), "the HelmChart of HelmRelease "+a+"/b-x")
	if err := mallory.Create(ctx, release(ab, "y")); err != nil {
		t.Errorf("a release whose HelmChart collides with none was refused: %v", err)
	}
}
