package placement

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// MaxJudgedBytes bounds what the placement webhooks decode of a Flux object: all of it
// but spec.values, metadata.managedFields and status, which no rule reads. An ordinary
// HelmRelease or Kustomization is a few KiB of it; a larger one is refused before
// anything is decoded, so one tenant's objects cannot cost the webhook (which every
// tenant's Flux objects wait on) memory in proportion to their size.
const MaxJudgedBytes = 256 << 10

// valuesDigest stands for spec.values in a decoded object: the webhooks compare values
// (an update that changes them is a spec change) and never read them.
type valuesDigest string

// errTooLarge is a Flux object whose judged part is past MaxJudgedBytes.
type errTooLarge struct{ judged int }

func (e errTooLarge) Error() string {
	return fmt.Sprintf("the object is %d KiB without its spec.values, more than the %d KiB the operator's admission judges; move what makes it large into spec.values or a ConfigMap (valuesFrom)",
		(e.judged+1023)/1024, MaxJudgedBytes/1024)
}

// rawRef is a JSON value not decoded yet. It aliases the input of the json.Unmarshal
// that filled it, so it is used before decodeJudged returns, never kept.
type rawRef []byte

func (r *rawRef) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// skipped are the members decodeJudged leaves out, per level: no rule reads them.
var skipped = map[string]map[string]bool{
	"":         {"status": true},
	"metadata": {"managedFields": true},
	"spec":     {"values": true},
}

// decodeJudged decodes a Flux object as the webhooks judge it: the generic JSON object
// without metadata.managedFields and status, with spec.values as its digest. What it
// decodes is measured first, from the raw members, and refused past MaxJudgedBytes
// (errTooLarge), so the cost of a request is bounded by what its rules read.
func decodeJudged(raw []byte) (map[string]any, error) {
	var top map[string]rawRef
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	judged := len(raw)
	nestedRaw := map[string]map[string]rawRef{}
	for _, level := range []string{"metadata", "spec"} {
		if len(top[level]) == 0 || top[level][0] != '{' {
			continue
		}
		var members map[string]rawRef
		if err := json.Unmarshal(top[level], &members); err != nil {
			return nil, fmt.Errorf("decoding the object's %s: %w", level, err)
		}
		nestedRaw[level] = members
		for k, v := range members {
			if skipped[level][k] {
				judged -= len(v)
			}
		}
	}
	for k, v := range top {
		if skipped[""][k] {
			judged -= len(v)
		}
	}
	if judged > MaxJudgedBytes {
		return nil, errTooLarge{judged: judged}
	}

	obj := make(map[string]any, len(top))
	for k, v := range top {
		if skipped[""][k] {
			continue
		}
		members, split := nestedRaw[k]
		if !split {
			var x any
			if err := json.Unmarshal(v, &x); err != nil {
				return nil, fmt.Errorf("decoding the object's %s: %w", k, err)
			}
			obj[k] = x
			continue
		}
		level := make(map[string]any, len(members))
		for mk, mv := range members {
			switch {
			case k == "spec" && mk == "values":
				sum := sha256.Sum256(mv)
				level[mk] = valuesDigest(hex.EncodeToString(sum[:]))
			case skipped[k][mk]:
			default:
				var x any
				if err := json.Unmarshal(mv, &x); err != nil {
					return nil, fmt.Errorf("decoding the object's %s.%s: %w", k, mk, err)
				}
				level[mk] = x
			}
		}
		obj[k] = level
	}
	return obj, nil
}

// isDeleted reports whether an object's metadata carries a deletionTimestamp, decoding
// nothing else.
func isDeleted(raw []byte) bool {
	var o struct {
		Metadata struct {
			DeletionTimestamp *string `json:"deletionTimestamp"`
		} `json:"metadata"`
	}
	return json.Unmarshal(raw, &o) == nil && o.Metadata.DeletionTimestamp != nil
}
