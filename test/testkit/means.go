package testkit

import (
	"fmt"
	"os"
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
	values map[string][]float64
}

// NewMeans starts collecting for b; call Report (deferred) when the loop ends.
func NewMeans(b *testing.B) *Means {
	return &Means{b: b, sums: map[string]float64{}, counts: map[string]int{}, values: map[string][]float64{}}
}

// Add records one iteration's value of unit.
func (m *Means) Add(unit string, v float64) {
	m.sums[unit] += v
	m.counts[unit]++
	m.values[unit] = append(m.values[unit], v)
}

// Quantile is the q-quantile (0..1) of vs by the nearest rank; vs is sorted in place.
func Quantile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	sort.Float64s(vs)
	i := int(q*float64(len(vs))+0.5) - 1
	return vs[min(max(i, 0), len(vs)-1)]
}

// Report reports the mean of every unit added, and prints (to stderr: a benchmark's
// log is cut after a few lines) each one's median, 90th percentile and range.
func (m *Means) Report() {
	units := make([]string, 0, len(m.sums))
	for u := range m.sums {
		units = append(units, u)
	}
	sort.Strings(units)
	for _, u := range units {
		m.b.ReportMetric(m.sums[u]/float64(m.counts[u]), u)
		vs := m.values[u]
		fmt.Fprintf(os.Stderr, "%s: n=%d median %.0f p90 %.0f min %.0f max %.0f mean %.0f (all: %v)\n", u, len(vs),
			Quantile(vs, 0.5), Quantile(vs, 0.9), vs[0], vs[len(vs)-1], m.sums[u]/float64(m.counts[u]), vs)
	}
}
