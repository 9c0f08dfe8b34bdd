package tenancy

import (
	"k8s.io/apimachinery/pkg/labels"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

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
