package remote

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// probeWhileWatched sends the storage probe to a watched plane every HealthInterval
// (jittered, counted from the last probe, whoever sent it) until its watches stop, and
// wakes the plane when a probe fails: its pass then finds it unreachable (a blip, or
// past the grace period, the gate closed). As Cluster API's clustercache health check,
// but on the probe the passes use, which needs the plane's datastore.
func (c *ClusterCache) probeWhileWatched(ctx context.Context, e *entry) {
	for {
		last := c.lastProbe(e)
		if !sleepUntil(ctx, last.Add(wait.Jitter(c.HealthInterval, 0.2))) {
			return
		}
		if c.lastProbe(e).After(last) {
			// A pass probed it meanwhile: count from that.
			continue
		}
		// The probe's client bounds it by Timeout.
		err := c.checkStorage(ctx, e)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			c.wake(e.key)
		}
	}
}

// lastProbe is when the plane was last probed, or a request to it failed.
func (c *ClusterCache) lastProbe(e *entry) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.failedAt.After(e.probedAt) {
		return e.failedAt
	}
	return e.probedAt
}

// sleepUntil waits until t (at once when t has passed) and says whether ctx is still
// live.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// SettledUntil says until when a settled plane needs no pass: its last full read found
// it as the operator left it, its watches and the cache's own probe (HealthInterval)
// wake it for anything before then. ok is false when the plane is not settled or the
// cache does not probe it; it then needs its periodic passes.
func (c *ClusterCache) SettledUntil(key types.NamespacedName) (until time.Time, ok bool) {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if c.HealthInterval <= 0 || e == nil || e.stopWatches == nil || e.settled == nil || !e.failingSince.IsZero() {
		return time.Time{}, false
	}
	return e.settled.until, true
}
