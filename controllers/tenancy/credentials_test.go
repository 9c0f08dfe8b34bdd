package tenancy

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSuspectNamesWalksEverything: the walk finds the credential at any depth, in lists,
// in order, and skips spec.values alone.
func TestSuspectNamesWalksEverything(t *testing.T) {
	var obj map[string]any
	if err := json.Unmarshal([]byte(`{"metadata":{"name":"x-applier-kubeconfig"},"spec":{
		"values":{"a":"x-applier-kubeconfig"},
		"postBuild":{"substituteFrom":[{"kind":"Secret","name":"other"},{"kind":"Secret","name":"x-applier-kubeconfig"}]},
		"decryption":{"secretRef":{"name":"y-applier-kubeconfig"}},
		"deep":[[{"n":"z-applier-kubeconfig"}]]}}`), &obj); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range SuspectNames(obj) {
		got = append(got, s.Path+"="+s.Value)
	}
	want := "spec.decryption.secretRef.name=y-applier-kubeconfig spec.deep[0][0].n=z-applier-kubeconfig spec.postBuild.substituteFrom[1].name=x-applier-kubeconfig"
	if strings.Join(got, " ") != want {
		t.Errorf("suspects = %v\nwant %s", got, want)
	}
	if p := pathOf("spec.deep[0][0].n").String(); p != "spec.deep[0][0].n" {
		t.Errorf("pathOf = %s", p)
	}
}
