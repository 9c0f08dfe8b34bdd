package remote

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestKindSignal: the first list of a kind is waited for (listed, once) and only counted;
// every change, and every later list (what happened while nothing watched), is news.
func TestKindSignal(t *testing.T) {
	var told []string
	listed := 0
	k := &kindSignal{changed: func(event string, first bool) {
		told = append(told, fmt.Sprintf("%s/%t", event, first))
	}, listed: func() { listed++ }}
	obj := &metav1.PartialObjectMetadata{}
	steps := []func() error{
		func() error { return k.Replace([]any{obj}, "10") },
		func() error { return k.Add(obj) },
		func() error { return k.Update(obj) },
		func() error { return k.Delete(obj) },
		k.Resync,
		func() error { return k.Replace(nil, "20") },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := fmt.Sprint(told), "[LISTED/true ADDED/false MODIFIED/false DELETED/false LISTED/false]"; got != want {
		t.Errorf("told %s, want %s", got, want)
	}
	if listed != 1 {
		t.Errorf("listed called %d times, want once", listed)
	}
}

// TestUnservedKindIsNotWatched: a kind the plane does not serve counts as listed (Get
// does not wait on it), and is not asked for again.
func TestUnservedKindIsNotWatched(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"}
	fake := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	var asked atomic.Int32
	notServed := func(clienttesting.Action) (bool, runtime.Object, error) {
		asked.Add(1)
		return true, nil, apierrors.NewNotFound(gvr.GroupResource(), "")
	}
	fake.PrependReactor("list", "*", notServed)
	fake.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		_, _, err := notServed(a)
		return true, nil, err
	})
	var mu sync.Mutex
	var told []string
	listed := make(chan struct{})
	k := &kindSignal{changed: func(event string, first bool) {
		mu.Lock()
		told = append(told, fmt.Sprintf("%s/%t", event, first))
		mu.Unlock()
	}, listed: func() { close(listed) }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		k.run(ctx, fake.Resource(gvr), "test", "", func(err error) { t.Errorf("reported as a failure: %v", err) })
		close(done)
	}()
	select {
	case <-listed:
	case <-time.After(10 * time.Second):
		t.Fatal("a kind the plane does not serve never counted as listed")
	}
	n := asked.Load()
	time.Sleep(2500 * time.Millisecond)
	if again := asked.Load() - n; again > 0 {
		t.Errorf("the kind was asked for %d more times after the plane said it does not serve it", again)
	}
	mu.Lock()
	if got := fmt.Sprint(told); got != "[LISTED/true]" {
		t.Errorf("told %s, want [LISTED/true]", got)
	}
	mu.Unlock()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not stop with its context")
	}
}

// TestQuiet: a full read lets passes skip the next ones only while nothing else is
// known: a change the watches report, another fingerprint (spec, class, credential),
// the resync deadline, a failed request, a drift or stopped watches each end it.
func TestQuiet(t *testing.T) {
	key := types.NamespacedName{Namespace: "t", Name: "p"}
	now := time.Now()
	for _, tc := range []struct {
		name  string
		after func(c *ClusterCache, e *entry)
		fp    string
		at    time.Time
		quiet bool
		why   string
	}{
		{name: "nothing happened", quiet: true},
		{name: "a change seen", after: func(c *ClusterCache, e *entry) { c.changed(e) }, why: UnsettledChanged},
		{name: "another fingerprint", fp: "p/2", why: UnsettledWantChanged},
		{name: "past the resync deadline", at: now.Add(time.Minute), why: UnsettledResyncDue},
		{name: "a request failed", after: func(c *ClusterCache, _ *entry) { c.Failed(key, errors.New("timeout")) }, why: UnsettledRequestFailed},
		{name: "a drift reported", after: func(c *ClusterCache, _ *entry) { c.Unsettle(key, UnsettledNotVerified) }, why: UnsettledNotVerified},
		{name: "watches stopped", after: func(c *ClusterCache, e *entry) { c.mu.Lock(); e.stop(); c.mu.Unlock() }, why: UnsettledNotWatched},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &ClusterCache{OnChange: func(types.NamespacedName) {}}
			c.init()
			e := &entry{key: key, stopWatches: func() {}}
			c.entries[key] = e
			c.changed(e) // the first list
			mark, ok := c.Mark(key)
			if !ok {
				t.Fatal("a watched plane gives no mark")
			}
			c.Settled(key, mark, "p/1", now.Add(30*time.Second))
			if tc.after != nil {
				tc.after(c, e)
			}
			fp, at := "p/1", now.Add(time.Second)
			if tc.fp != "" {
				fp = tc.fp
			}
			if !tc.at.IsZero() {
				at = tc.at
			}
			if got, why := c.Quiet(key, fp, at); got != tc.quiet || why != tc.why {
				t.Errorf("Quiet = %v, %q; want %v, %q", got, why, tc.quiet, tc.why)
			}
		})
	}

	// A change between the mark and the end of the read: the read may have missed it.
	c := &ClusterCache{OnChange: func(types.NamespacedName) {}}
	c.init()
	e := &entry{key: key, stopWatches: func() {}}
	c.entries[key] = e
	mark, _ := c.Mark(key)
	c.changed(e)
	c.Settled(key, mark, "p/1", now.Add(30*time.Second))
	if quiet, why := c.Quiet(key, "p/1", now); quiet || why != UnsettledChanged {
		t.Errorf("Quiet = %v, %q after a change that came during the full read; want false, %q", quiet, why, UnsettledChanged)
	}
	// Not watched: never quiet, whatever was read.
	delete(c.entries, key)
	c.entries[key] = &entry{key: key}
	if _, ok := c.Mark(key); ok {
		t.Error("an unwatched plane gives a mark")
	}
	if _, why := c.Quiet(key, "p/1", now); why != UnsettledNotWatched {
		t.Errorf("an unwatched plane: Quiet says %q, want %q", why, UnsettledNotWatched)
	}
}
