package placement

import (
	"fmt"
	"testing"
)

func TestChartOwners(t *testing.T) {
	for _, tc := range []struct{ namespace, name, want string }{
		{"a", "b-x", "[a-b/x]"},
		{"a-b", "x", "[a/b-x]"},
		{"tenant-root", "app", "[tenant/root-app]"},
		{"a", "x", "[]"},
	} {
		if got := fmt.Sprint(chartOwners(tc.namespace, tc.name)); got != tc.want {
			t.Errorf("chartOwners(%s, %s) = %s, want %s", tc.namespace, tc.name, got, tc.want)
		}
	}
	obj := map[string]any{"spec": map[string]any{"chart": map[string]any{"spec": map[string]any{"sourceRef": map[string]any{"namespace": "cozy-public"}}}}}
	if ns, name, ok := chartTemplate(obj, "a", "b-x"); !ok || ns != "cozy-public" || name != "a-b-x" {
		t.Errorf("chartTemplate = %s/%s %v", ns, name, ok)
	}
	if _, _, ok := chartTemplate(map[string]any{"spec": map[string]any{"chartRef": map[string]any{}}}, "a", "x"); ok {
		t.Error("a chartRef makes no HelmChart")
	}
}
