package devenv

import (
	"sort"
	"testing"
)

// Means collects a benchmark's figures over its iterations and reports each one's mean:
// b.ReportMetric keeps only the last value it is given for a unit, so a benchmark that
// reported per iteration would show its last run, not its average.
type Means struct {
	b      *testing.B
	sums   map[string]float64
	counts map[string]int
}

// NewMeans starts collecting for b; call Report (deferred) when the loop ends.
func NewMeans(b *testing.B) *Means {
	return &Means{b: b, sums: map[string]float64{}, counts: map[string]int{}}
}

// Add records one iteration's value of unit.
func (m *Means) Add(unit string, v float64) {
	m.sums[unit] += v
	m.counts[unit]++
}

// Report reports the mean of every unit added.
func (m *Means) Report() {
	units := make([]string, 0, len(m.sums))
	for u := range m.sums {
		units = append(units, u)
	}
	sort.Strings(units)
	for _, u := range units {
		m.b.ReportMetric(m.sums[u]/float64(m.counts[u]), u)
	}
}
