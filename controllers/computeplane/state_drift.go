package computeplane

import (
	"time"
)

// Drift repairs back off when they repeat: the first is repaired at once, the next
// after DriftBackoffBase, doubling up to DriftBackoffMax. A plane left alone for
// DriftQuietPeriod starts again from the first. Another writer fighting the operator
// over the same object (and, through the gate, over the applier credential) so costs a
// few writes an hour, not a hot loop.
const (
	DriftBackoffBase = 500 * time.Millisecond
	DriftBackoffMax  = 5 * time.Minute
	DriftQuietPeriod = 10 * time.Minute
)

// driftSeries is a plane's drifts in a row.
type driftSeries struct {
	count     int
	last      time.Time
	notBefore time.Time
}

// next records a drift at now and returns how long its repair waits and how many
// drifts the series holds. It is pure.
func (d *driftSeries) next(now time.Time) (time.Duration, int) {
	if now.Sub(d.last) > DriftQuietPeriod {
		*d = driftSeries{}
	}
	d.count++
	d.last = now
	delay := driftBackoff(d.count)
	d.notBefore = now.Add(delay)
	return delay, d.count
}

// wait is how long the repair of the series' last drift must still wait.
func (d *driftSeries) wait(now time.Time) time.Duration {
	if now.Before(d.notBefore) {
		return d.notBefore.Sub(now)
	}
	return 0
}

// driftBackoff is the wait before repairing the n-th drift in a row.
func driftBackoff(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	d := DriftBackoffBase
	for i := 2; i < n && d < DriftBackoffMax; i++ {
		d *= 2
	}
	return min(d, DriftBackoffMax)
}
