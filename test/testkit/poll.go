package testkit

import (
	"testing"
	"time"
)

// Eventually polls f every 50 ms until it returns nil, and fails tb with f's last error
// when timeout passes first. Every suite and benchmark waits through it (or Poll).
func Eventually(tb testing.TB, timeout time.Duration, f func() error) {
	tb.Helper()
	Poll(tb, timeout, 50*time.Millisecond, f)
}

// Poll is Eventually with a chosen interval: benchmarks timing sub-second reactions
// poll faster, suites listing a thousand objects slower.
func Poll(tb testing.TB, timeout, interval time.Duration, f func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}
