package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAttackKeptAndHookObjectsOutliveTheRelease: a tenant's chart keeps objects past
// Helm's uninstall (helm.sh/resource-policy: keep) and leaves its hooks' objects (Helm
// never tracks them; a pre-delete hook even makes one during the uninstall), the same
// orphan that deletionPropagation: orphan is refused for. The real Flux uninstalls the
// deleted release; the operator then removes what is left before the release goes, and
// nothing else: another release's objects and the plane's own stay.
func TestAttackKeptAndHookObjectsOutliveTheRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := newPlane(t, ctx)
	eventually(t, settle, planeReady(ctx, p))
	plane := planeClient(t, ctx, p)
	ns := p.Namespace

	// Bystanders: another release's object (its Flux origin labels), and the plane's own.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-release", Labels: map[string]string{
		"helm.toolkit.fluxcd.io/name": "other", "helm.toolkit.fluxcd.io/namespace": ns}}}
	own := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plane-own"}}
	for _, o := range []client.Object{other, own} {
		if err := plane.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	hr := release(ns, "leaves", "leftovers", "")
	if err := k8s.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, releaseReady(ctx, hr))
	// The module's Flux API predates the field: read it as the API server stores it.
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(helmv2.GroupVersion.WithKind(helmv2.HelmReleaseKind))
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), stored); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := unstructured.NestedString(stored.Object, "spec", "postRenderStrategy"); st != "combined" {
		t.Errorf("admission stored postRenderStrategy %q, want combined", st)
	}
	hook := &corev1.ConfigMap{}
	if err := plane.Get(ctx, client.ObjectKey{Namespace: ns, Name: "leaves-hook"}, hook); err != nil {
		t.Fatalf("the chart's post-install hook made nothing: %v", err)
	}
	if hook.Labels["helm.toolkit.fluxcd.io/name"] != "leaves" {
		t.Errorf("the hook's object carries no Flux origin labels: %v", hook.Labels)
	}

	if err := k8s.Delete(ctx, hr); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), &helmv2.HelmRelease{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the release is still there (err=%v); its events: %s", err, eventsOf(ctx, hr))
		}
		return nil
	})
	// The release is gone: nothing of it may be left in the plane.
	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "leaves"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "leaves-kept"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "leaves-kept"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "leaves-hook"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "leaves-pre-delete"}},
	} {
		err := plane.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.GetName()}, o)
		if !apierrors.IsNotFound(err) {
			t.Errorf("%T %s/%s outlived its release (err=%v)", o, ns, o.GetName(), err)
		}
	}
	for _, o := range []client.Object{other, own} {
		if err := plane.Get(ctx, client.ObjectKeyFromObject(o), &corev1.ConfigMap{}); err != nil {
			t.Errorf("ConfigMap %s, not the release's, was removed with it: %v", o.GetName(), err)
		}
	}
}

// eventsOf is what the operator told of an object, for a failure's message.
func eventsOf(ctx context.Context, o client.Object) string {
	var list eventsv1.EventList
	if err := k8s.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == o.GetName() {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return strings.Join(out, "; ")
}
