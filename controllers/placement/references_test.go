package placement

import (
	"slices"
	"testing"

	"github.com/cozystack/computeplane/controllers/tenancy"
)

func TestSuspectPlanes(t *testing.T) {
	got := suspectPlanes([]tenancy.NamedString{
		{Path: "spec.kubeConfig.secretRef.name", Value: "a-applier-kubeconfig"},
		{Path: "spec.valuesFrom[0].name", Value: "a-applier-kubeconfig"},
		{Path: "spec.valuesFrom[1].name", Value: "b-applier-kubeconfig"},
		{Path: "spec.x", Value: "-applier-kubeconfig"},
		{Path: "spec.y", Value: "Not A/Name-applier-kubeconfig"},
	})
	if want := []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("suspectPlanes = %q, want %q (distinct, only names a plane could have)", got, want)
	}
}
