package computeplane

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxCacheLag bounds how long a reconcile waits for the cache to show the status it
// wrote: past it (a broken watch, say) it goes on with what the cache has.
const maxCacheLag = 10 * time.Second

// ownWrite is what a plane's state remembers of its last status write: the
// resourceVersion a reconcile started from when it wrote the plane's status. A
// reconcile that starts before the informer has delivered that write reads the old
// object from the cache: its conditions' transition times, its events and its stage
// timings would then be computed against a status that is no longer there (a gate that
// closed and reopened would show as never closed). Such a reconcile waits for the cache
// instead.
type ownWrite struct {
	// held: a write is remembered (until the cache shows it, or waiting is pointless).
	held        bool
	fromVersion string
	at          time.Time
}

// wrote records that the status of key was written over resourceVersion from.
func (m *planeStates) wrote(key client.ObjectKey, from string, now time.Time) {
	m.with(key, func(s *planeState) { s.write = ownWrite{held: true, fromVersion: from, at: now} })
}

// behind reports whether the cached object of key (at resourceVersion seen) is still
// the one a status write replaced. Once it is not (or waiting is pointless), it forgets
// the write. It never makes state.
func (m *planeStates) behind(key client.ObjectKey, seen string, now time.Time) (behind bool) {
	m.peek(key, func(s *planeState) {
		if s == nil || !s.write.held {
			return
		}
		if s.write.fromVersion == seen && now.Sub(s.write.at) < maxCacheLag {
			behind = true
			return
		}
		s.write = ownWrite{}
	})
	return behind
}
