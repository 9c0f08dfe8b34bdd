package ssa

import (
	"testing"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func TestMatches(t *testing.T) {
	obj := func(spec any, labels map[string]any) map[string]any {
		md := map[string]any{"name": "x"}
		if labels != nil {
			md["labels"] = labels
		}
		return map[string]any{"apiVersion": "v1", "kind": "K", "metadata": md, "spec": spec}
	}
	want := obj(map[string]any{"a": 1.0, "rules": []any{map[string]any{"verbs": []any{"get"}}}, "empty": map[string]any{}},
		map[string]any{"app": "x"})
	cases := []struct {
		name  string
		live  map[string]any
		exact []string
		match bool
	}{
		{"same", obj(map[string]any{"a": 1.0, "rules": []any{map[string]any{"verbs": []any{"get"}}}}, map[string]any{"app": "x"}), nil, true},
		{"server defaults added", obj(map[string]any{"a": 1.0, "b": "default", "rules": []any{map[string]any{"verbs": []any{"get"}, "x": 1.0}}},
			map[string]any{"app": "x", "other": "y"}), nil, true},
		{"value changed", obj(map[string]any{"a": 2.0, "rules": []any{map[string]any{"verbs": []any{"get"}}}}, map[string]any{"app": "x"}), nil, false},
		{"list item added", obj(map[string]any{"a": 1.0, "rules": []any{map[string]any{"verbs": []any{"get"}}, map[string]any{"verbs": []any{"*"}}}},
			map[string]any{"app": "x"}), nil, false},
		{"verb added", obj(map[string]any{"a": 1.0, "rules": []any{map[string]any{"verbs": []any{"get", "create"}}}}, map[string]any{"app": "x"}), nil, false},
		{"label removed", obj(map[string]any{"a": 1.0, "rules": []any{map[string]any{"verbs": []any{"get"}}}}, nil), nil, false},
		{"missing field", obj(map[string]any{"rules": []any{map[string]any{"verbs": []any{"get"}}}}, map[string]any{"app": "x"}), nil, false},
		{"exact: a field added", obj(map[string]any{"a": 1.0, "b": true, "rules": []any{map[string]any{"verbs": []any{"get"}}}}, map[string]any{"app": "x"}),
			[]string{"spec"}, false},
		{"exact: same, empties dropped", obj(map[string]any{"a": 1.0, "rules": []any{map[string]any{"verbs": []any{"get"}}}}, map[string]any{"app": "x"}),
			[]string{"spec"}, true},
	}
	for _, tc := range cases {
		if got := Matches(tc.live, want, tc.exact...); got != tc.match {
			t.Errorf("%s: Matches = %v, want %v", tc.name, got, tc.match)
		}
	}

	// The applied-hash record is not content; owner references are, by UID.
	w := obj(nil, nil)
	w["metadata"].(map[string]any)["annotations"] = map[string]any{cpv1.AppliedHashAnnotation: "h1"}
	w["metadata"].(map[string]any)["ownerReferences"] = []any{map[string]any{"uid": "u1", "kind": "ComputePlane"}}
	l := obj(nil, nil)
	l["metadata"].(map[string]any)["annotations"] = map[string]any{cpv1.AppliedHashAnnotation: "h0"}
	l["metadata"].(map[string]any)["ownerReferences"] = []any{map[string]any{"uid": "u0"}, map[string]any{"uid": "u1", "kind": "ComputePlane", "controller": true}}
	if !Matches(l, w) {
		t.Error("an older applied-hash or an extra owner reference made the object differ")
	}
	l["metadata"].(map[string]any)["ownerReferences"] = []any{map[string]any{"uid": "u0"}}
	if Matches(l, w) {
		t.Error("a missing owner reference went unnoticed")
	}
}
