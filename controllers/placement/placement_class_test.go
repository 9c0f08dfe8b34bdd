package placement

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func TestMatchingClasses(t *testing.T) {
	class := func(name string, sel *metav1.LabelSelector) cpv1.ComputePlaneClass {
		c := cpv1.ComputePlaneClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
		c.Spec.PlacementReleases.Selector = sel
		return c
	}
	notebooks := &metav1.LabelSelector{MatchLabels: map[string]string{"kind": "notebook"}}
	gpu := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kind", Operator: metav1.LabelSelectorOpIn, Values: []string{"notebook", "trainer"}}}}
	classes := []cpv1.ComputePlaneClass{
		class("z-gpu", gpu), class("a-notebooks", notebooks), class("plain", nil),
		class("empty", &metav1.LabelSelector{}), // refused by the schema; never matches
		class("malformed", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kind", Operator: "Near"}}}),
	}
	names := func(cs []cpv1.ComputePlaneClass) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	for _, tc := range []struct {
		labels map[string]string
		want   []string
	}{
		{map[string]string{"kind": "notebook"}, []string{"a-notebooks", "z-gpu"}},
		{map[string]string{"kind": "trainer"}, []string{"z-gpu"}},
		{map[string]string{"kind": "database"}, nil},
		{nil, nil},
	} {
		if got := names(matchingClasses(classes, tc.labels)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("labels %v: matching %v, want %v", tc.labels, got, tc.want)
		}
	}
}
