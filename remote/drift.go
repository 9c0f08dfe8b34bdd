package remote

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
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

type driftRecord struct {
	count     int
	last      time.Time
	notBefore time.Time
}

// DriftDelay records a drift of the plane and returns how long to wait before
// repairing it, and how many drifts the plane had in a row.
func (c *ClusterCache) DriftDelay(key types.NamespacedName, now time.Time) (time.Duration, int) {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.drifts[key]
	if d == nil || now.Sub(d.last) > DriftQuietPeriod {
		d = &driftRecord{}
		c.drifts[key] = d
	}
	d.count++
	d.last = now
	delay := driftBackoff(d.count)
	d.notBefore = now.Add(delay)
	return delay, d.count
}

// RepairWait is how long the repair of the plane's last drift must still wait. Events
// the drift report itself causes (the revoked credential, the status) must not repair
// early, or the backoff would mean nothing.
func (c *ClusterCache) RepairWait(key types.NamespacedName, now time.Time) time.Duration {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.drifts[key]; d != nil && now.Before(d.notBefore) {
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
