package ssa

import (
	"reflect"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// Matches reports whether a live object (as plain JSON values) holds what the operator
// applies (want, in the same form): every field want sets, with the same value, the
// object's metadata compared only on its labels, annotations (but the applied-hash
// record) and owner references. Fields the server or another controller added are
// allowed (defaults, a replica count the autoscaler owns), except under the top-level
// fields named in exact, which must equal want with nothing added. Lists are compared
// item by item and must have the same length: every list the operator writes is one it
// owns whole, and an extra item (a rule, a subject) is a change. It is pure.
func Matches(live, want map[string]any, exact ...string) bool {
	for k, w := range want {
		switch k {
		case "apiVersion", "kind", "status":
			continue
		case "metadata":
			if !metadataMatches(asMap(live[k]), asMap(w)) {
				return false
			}
		default:
			if contains(exact, k) {
				if !reflect.DeepEqual(dropEmpty(live[k]), dropEmpty(w)) {
					return false
				}
			} else if !Covers(live[k], w) {
				return false
			}
		}
	}
	return true
}

// Covers reports whether live holds every value of want: maps may have more keys,
// lists must be as long and covered item by item, anything else equal. An empty map,
// list or null in want is covered by an absent value (the server drops empty objects).
func Covers(live, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		if live == nil && len(w) == 0 {
			return true
		}
		l, ok := live.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			lv, ok := l[k]
			if !ok {
				if isEmpty(wv) {
					continue
				}
				return false
			}
			if !Covers(lv, wv) {
				return false
			}
		}
		return true
	case []any:
		if live == nil && len(w) == 0 {
			return true
		}
		l, ok := live.([]any)
		if !ok || len(l) != len(w) {
			return false
		}
		for i := range w {
			if !Covers(l[i], w[i]) {
				return false
			}
		}
		return true
	case nil:
		return live == nil
	default:
		return reflect.DeepEqual(live, want)
	}
}

func metadataMatches(live, want map[string]any) bool {
	for _, k := range []string{"labels", "annotations"} {
		w := asMap(want[k])
		if k == "annotations" {
			w = without(w, cpv1.AppliedHashAnnotation)
		}
		if !Covers(asMap(live[k]), w) {
			return false
		}
	}
	refs, _ := want["ownerReferences"].([]any)
	liveRefs, _ := live["ownerReferences"].([]any)
	for _, r := range refs {
		found := false
		for _, lr := range liveRefs {
			if asMap(lr)["uid"] == asMap(r)["uid"] && Covers(lr, r) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func without(m map[string]any, key string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// dropEmpty removes empty maps, lists and nulls, which the server may drop or keep.
func dropEmpty(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, vv := range x {
			if d := dropEmpty(vv); !isEmpty(d) {
				out[k] = d
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = dropEmpty(x[i])
		}
		return out
	}
	return v
}
