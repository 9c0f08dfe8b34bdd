package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// scriptedKind answers lists with version "10" and hands out watch streams whose events
// the test writes; it records the versions the watches were opened from.
type scriptedKind struct {
	mu      sync.Mutex
	lists   int
	from    []string
	watches chan *scriptedStream
	refuse  error
}

func (k *scriptedKind) list(context.Context, metav1.ListOptions) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lists++
	return "10", nil
}

func (k *scriptedKind) watch(_ context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
	k.mu.Lock()
	k.from = append(k.from, o.ResourceVersion)
	refuse := k.refuse
	k.refuse = nil
	k.mu.Unlock()
	if refuse != nil {
		return nil, refuse
	}
	r, w := io.Pipe()
	k.watches <- &scriptedStream{w: w}
	return r, nil
}

func (k *scriptedKind) state() (int, []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lists, append([]string(nil), k.from...)
}

// scriptedStream writes a watch's events as the API server does: one JSON
// metav1.WatchEvent after another.
type scriptedStream struct{ w *io.PipeWriter }

func (s *scriptedStream) send(t *testing.T, typ watch.EventType, obj runtime.Object) {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := json.Marshal(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Write(append(ev, '\n')); err != nil {
		t.Fatal(err)
	}
}

func (s *scriptedStream) end() { _ = s.w.Close() }

func object(rv string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: rv}}
}

// TestKindWatchResumes: a watch that ends is reopened from the last version seen (an
// event's or a bookmark's), without a list and without a change reported; a version
// the server no longer has (410, as an event or as the watch's answer) means a new list,
// and that list is reported as a change, since events may have been missed.
func TestKindWatchResumes(t *testing.T) {
	expired := apierrors.NewResourceExpired("too old resource version: 12 (40)")
	k := &scriptedKind{watches: make(chan *scriptedStream)}
	changed := make(chan struct{}, 10)
	var mu sync.Mutex
	var events []string
	w := &kindWatch{src: k, changed: func(event string) {
		mu.Lock()
		events = append(events, event)
		mu.Unlock()
		if event != WatchExpired {
			changed <- struct{}{}
		}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { w.run(ctx, func(error) {}); close(done) }()

	next := func() *scriptedStream {
		t.Helper()
		select {
		case s := <-k.watches:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("no watch opened")
			return nil
		}
	}
	expectChanges := func(n int, what string) {
		t.Helper()
		for range n {
			select {
			case <-changed:
			case <-time.After(5 * time.Second):
				t.Fatalf("no change reported %s", what)
			}
		}
		select {
		case <-changed:
			t.Fatalf("a change reported %s beyond the %d expected", what, n)
		case <-time.After(100 * time.Millisecond):
		}
	}

	s := next()
	expectChanges(1, "for the first list")
	s.send(t, watch.Modified, object("11"))
	expectChanges(1, "for a modification")
	s.send(t, watch.Bookmark, object("12"))
	time.Sleep(1100 * time.Millisecond) // a watch ending sooner counts as a failure
	s.end()
	s = next()
	expectChanges(0, "for a bookmark and a watch reopened")
	status := expired.ErrStatus
	status.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	s.send(t, watch.Error, &status)
	s = next()
	expectChanges(1, "for the list after an expired version")
	k.mu.Lock()
	k.refuse = expired
	k.mu.Unlock()
	s.end()
	s = next()
	expectChanges(1, "for the list after a watch refused as expired")

	mu.Lock()
	told := fmt.Sprint(events)
	mu.Unlock()
	if want := "[LISTED MODIFIED EXPIRED LISTED EXPIRED LISTED]"; told != want {
		t.Errorf("told %s, want %s", told, want)
	}
	lists, from := k.state()
	want := []string{"10", "12", "10", "10", "10"}
	if lists != 3 || len(from) != len(want) {
		t.Fatalf("%d lists, watches from %v; want 3 lists, watches from %v", lists, from, want)
	}
	for i := range want {
		if from[i] != want[i] {
			t.Errorf("watch %d opened from %q, want %q (all: %v)", i, from[i], want[i], from)
		}
	}
	cancel()
	s.end()
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

// chunkedStream returns its chunks one Read at a time, however the server's writes and
// the connection's frames cut the stream.
type chunkedStream struct {
	chunks [][]byte
	end    error
}

func (c *chunkedStream) Read(p []byte) (int, error) {
	for len(c.chunks) > 0 && len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	if len(c.chunks) == 0 {
		return 0, c.end
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	return n, nil
}

func (c *chunkedStream) Close() error { return nil }

// TestFollowDecodesHoweverTheStreamIsCut: events split across reads, several in one,
// whitespace between them, an event cut off by the stream's end.
func TestFollowDecodesHoweverTheStreamIsCut(t *testing.T) {
	event := func(typ watch.EventType, rv string) string {
		raw, err := json.Marshal(object(rv))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := json.Marshal(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}})
		if err != nil {
			t.Fatal(err)
		}
		return string(ev)
	}
	stream := event(watch.Added, "11") + "\n" + event(watch.Bookmark, "12") + "\n" + event(watch.Deleted, "13") + "\n"
	for _, c := range []struct {
		name   string
		chunks []string
		end    error
		rv     string
		events string
		err    bool
	}{
		{name: "one event per read", chunks: strings.SplitAfter(stream, "\n"), end: io.EOF, rv: "13", events: "[ADDED DELETED]"},
		{name: "all in one read", chunks: []string{stream}, end: io.EOF, rv: "13", events: "[ADDED DELETED]"},
		{name: "cut every 7 bytes", chunks: cut(stream, 7), end: io.EOF, rv: "13", events: "[ADDED DELETED]"},
		{name: "no newlines, spaces", chunks: []string{event(watch.Modified, "20"), "  ", event(watch.Modified, "21")}, end: io.EOF, rv: "21", events: "[MODIFIED MODIFIED]"},
		{name: "cut off mid-event", chunks: []string{event(watch.Added, "30"), event(watch.Added, "31")[:20]}, end: io.EOF, rv: "30", events: "[ADDED]", err: true},
		{name: "connection reset", chunks: []string{event(watch.Added, "40") + "\n"}, end: errors.New("stream reset"), rv: "40", events: "[ADDED]", err: true},
		{name: "nothing", end: io.EOF, rv: "10", events: "[]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var told []string
			w := &kindWatch{changed: func(event string) { told = append(told, event) }}
			s := &chunkedStream{end: c.end}
			for _, ch := range c.chunks {
				s.chunks = append(s.chunks, []byte(ch))
			}
			rv, err := w.follow(s, "10")
			if rv != c.rv || fmt.Sprint(told) != c.events || (err != nil) != c.err {
				t.Errorf("follow = %q, %v, told %v; want %q, error %v, told %s", rv, err, told, c.rv, c.err, c.events)
			}
		})
	}
}

func cut(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}
