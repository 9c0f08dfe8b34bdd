package controllers

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/labels"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// ShardKeyLabel is the label that assigns a ComputePlane to a shard, as Flux's objects
// are assigned: each shard's manager runs with --watch-label-selector naming its keys
// (e.g. `sharding.fluxcd.io/key in (shard1)`), and the main one with
// `!sharding.fluxcd.io/key`, so every plane has exactly one.
const ShardKeyLabel = "sharding.fluxcd.io/key"

// Shard is the set of ComputePlanes one manager reconciles. The zero Shard holds
// every plane (one manager, no sharding).
type Shard struct {
	Selector labels.Selector
}

// Holds reports whether plane (nil: a namespace without one) belongs to the shard.
// A namespace without a plane belongs to the shard that would hold a plane without
// labels: its placement releases are told so by exactly one manager.
func (s Shard) Holds(p *cpv1.ComputePlane) bool {
	if s.Selector == nil || s.Selector.Empty() {
		return true
	}
	if p == nil {
		return s.Selector.Matches(labels.Set{})
	}
	return s.Selector.Matches(labels.Set(p.Labels))
}

// LeaderElectionIDFor is the Lease a shard's replicas elect their leader with: each
// shard has its own leader, and the unsharded manager keeps LeaderElectionID.
func LeaderElectionIDFor(selector labels.Selector) string {
	if selector == nil || selector.Empty() {
		return LeaderElectionID
	}
	sum := sha256.Sum256([]byte(selector.String()))
	return "shard-" + hex.EncodeToString(sum[:4]) + "." + LeaderElectionID
}
