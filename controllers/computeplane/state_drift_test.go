package computeplane

import (
	"testing"
	"time"
)

func TestDriftBackoff(t *testing.T) {
	want := []time.Duration{0, 0, DriftBackoffBase, 2 * DriftBackoffBase, 4 * DriftBackoffBase}
	for n := 1; n < len(want); n++ {
		if got := driftBackoff(n); got != want[n] {
			t.Errorf("drift %d: %s, want %s", n, got, want[n])
		}
	}
	if got := driftBackoff(100); got != DriftBackoffMax {
		t.Errorf("drift 100: %s, want the ceiling %s", got, DriftBackoffMax)
	}
	var c driftSeries
	now := time.Now()
	if d, n := c.next(now); d != 0 || n != 1 {
		t.Errorf("first drift: %s #%d", d, n)
	}
	if d, n := c.next(now.Add(time.Second)); d != DriftBackoffBase || n != 2 {
		t.Errorf("second drift: %s #%d", d, n)
	}
	if w := c.wait(now.Add(time.Second + DriftBackoffBase/2)); w != DriftBackoffBase/2 {
		t.Errorf("half way through the backoff the repair waits %s more, want %s", w, DriftBackoffBase/2)
	}
	if w := c.wait(now.Add(time.Second + DriftBackoffBase)); w != 0 {
		t.Errorf("after the backoff the repair still waits %s", w)
	}
	if d, n := c.next(now.Add(DriftQuietPeriod + 2*time.Second)); d != 0 || n != 1 {
		t.Errorf("after a quiet period: %s #%d, want a fresh start", d, n)
	}
}
