package computeplane

import (
	"strings"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// TestAddonIdentity: what the add-on cache keeps of a HelmRelease is what the operator
// reads (identity, its own labels, the release name, whether it is suspended: the teardown
// suspends each add-on once, not on every pass; the Ready condition, bounded), and
// nothing a tenant could make large.
func TestAddonIdentity(t *testing.T) {
	hr := &helmv2.HelmRelease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cni", UID: "u", ResourceVersion: "7", Generation: 3,
			Labels:      map[string]string{cpv1.ManagedByLabel: cpv1.ManagedByValue, cpv1.AddonRoleLabel: "cni", "other": "x"},
			Annotations: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: helmv2.HelmReleaseSpec{ReleaseName: "cilium", Suspend: true, Values: &apiextensionsv1.JSON{Raw: []byte(`{"a":1}`)}},
		Status: helmv2.HelmReleaseStatus{ObservedGeneration: 3, Conditions: []metav1.Condition{
			{Type: fluxmeta.ReadyCondition, Status: metav1.ConditionFalse, Message: strings.Repeat("m", 4*maxAddonMessage)},
			{Type: "Released", Status: metav1.ConditionTrue, Message: "big"},
		}},
	}
	got, err := addonIdentity(hr)
	if err != nil {
		t.Fatal(err)
	}
	out := got.(*helmv2.HelmRelease)
	if out.Name != "cni" || out.UID != "u" || out.ResourceVersion != "7" || out.Generation != 3 || out.Spec.ReleaseName != "cilium" || !out.Spec.Suspend || out.Status.ObservedGeneration != 3 {
		t.Errorf("lost what the operator reads: %+v", out)
	}
	if len(out.Labels) != 2 || out.Labels["other"] != "" || len(out.Annotations) != 0 || len(out.ManagedFields) != 0 || out.Spec.Values != nil {
		t.Errorf("kept what the operator does not read: labels %v, annotations %v, values %v", out.Labels, out.Annotations, out.Spec.Values)
	}
	if len(out.Status.Conditions) != 1 || out.Status.Conditions[0].Type != fluxmeta.ReadyCondition || len(out.Status.Conditions[0].Message) > maxAddonMessage+len("…") {
		t.Errorf("conditions kept: %d, Ready message %d bytes", len(out.Status.Conditions), len(out.Status.Conditions[0].Message))
	}
	if hr.Spec.Values == nil || len(hr.Labels) != 3 {
		t.Error("the transform changed the object it was given")
	}
	if other, _ := addonIdentity("not a release"); other != "not a release" {
		t.Errorf("another object changed: %v", other)
	}
}
