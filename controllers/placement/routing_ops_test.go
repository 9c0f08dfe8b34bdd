package placement

import (
	"encoding/json"
	"maps"

	jsonpatch5 "github.com/evanphx/json-patch/v5"
	"gomodules.xyz/jsonpatch/v2"
)

// routeRelease applies routingOps to a decoded release as the API server applies the
// mutating webhook's patch (with a JSON patch implementation of its own), so the tests
// judge what admission stores.
func routeRelease(obj map[string]any, r placementRoute) { applyOps(obj, routingOps(obj, r)) }

func applyOps(obj map[string]any, ops []jsonpatch.Operation) {
	doc, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		panic(err)
	}
	patch, err := jsonpatch5.DecodePatch(raw)
	if err != nil {
		panic(err)
	}
	if doc, err = patch.Apply(doc); err != nil {
		panic(err)
	}
	var out map[string]any
	if err := json.Unmarshal(doc, &out); err != nil {
		panic(err)
	}
	clear(obj)
	maps.Copy(obj, out)
}
