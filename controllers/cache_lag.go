package controllers

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxCacheLag bounds how long a reconcile waits for the cache to show the status it
// wrote: past it (a broken watch, say) it goes on with what the cache has.
const maxCacheLag = 10 * time.Second

// ownWrites remembers, per plane, the resourceVersion a reconcile started from when it
// wrote the plane's status. A reconcile that starts before the informer has delivered
// that write reads the old object from the cache: its conditions' transition times,
// its events and its stage timings would then be computed against a status that is no
// longer there (a gate that closed and reopened would show as never closed). Such a
// reconcile waits for the cache instead.
type ownWrites struct {
	mu      sync.Mutex
	written map[client.ObjectKey]ownWrite
}

type ownWrite struct {
	fromVersion string
	at          time.Time
}

// wrote records that the status of key was written over resourceVersion from.
func (w *ownWrites) wrote(key client.ObjectKey, from string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written == nil {
		w.written = map[client.ObjectKey]ownWrite{}
	}
	w.written[key] = ownWrite{fromVersion: from, at: now}
}

// behind reports whether the cached object of key (at resourceVersion seen) is still
// the one a status write replaced. Once it is not (or waiting is pointless), it forgets
// the write.
func (w *ownWrites) behind(key client.ObjectKey, seen string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	wr, ok := w.written[key]
	if !ok {
		return false
	}
	if wr.fromVersion == seen && now.Sub(wr.at) < maxCacheLag {
		return true
	}
	delete(w.written, key)
	return false
}

// forget drops what is remembered of key (the plane is gone).
func (w *ownWrites) remembers(key client.ObjectKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.written[key]
	return ok
}

func (w *ownWrites) forget(key client.ObjectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.written, key)
}
