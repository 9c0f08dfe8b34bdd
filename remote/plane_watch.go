package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metascheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// WatchedResources are the kinds of a plane the operator reacts to at once: everything
// its hardening reads that its admission policies cannot guard (a namespace created, a
// policy or binding deleted or edited, a mutating policy bound: Kubernetes runs no
// admission policy on admission policies). Namespaces and mutating admission policy
// bindings are watched in full (the operator creates none of the latter: any is a
// finding), the validating policies and bindings through WatchSelector. Mutating
// policies themselves are not watched: one acts only through a binding, and a binding
// (watched) is a finding whatever it binds, so an unbound policy (harmless) is found by
// the full read every resync interval, a bound one at once. What the operator created
// in namespaces (identities, quotas) is not watched either: the operator-objects policy
// lets no one else change it, and that policy is watched; the full read every resync
// interval still compares it. So a plane whose watches saw nothing needs no full read
// until then (ClusterCache.Quiet).
var WatchedResources = []schema.GroupVersionResource{
	{Version: "v1", Resource: "namespaces"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
}

// What a plane's watches tell OnWatchEvent besides the events' own types.
const (
	WatchListed  = "LISTED"
	WatchExpired = "EXPIRED"
)

const (
	// watchTimeout bounds one watch request (the API server ends it then, and it is
	// reopened from the last version seen), as client-go's reflectors do, so a watch
	// that silently stopped delivering does not last forever.
	watchTimeout = 5 * time.Minute
	// watchRetryMax caps the wait before a failed list or watch is tried again.
	watchRetryMax = 30 * time.Second
)

// watchPlane runs one watch per watched kind of the plane until ctx ends. A plane's
// watches only say "something of this plane changed": the operator reads planes
// directly, so they keep nothing (no store, no queue, no handler goroutines; metadata
// only on the wire). Each kind costs one goroutine, which also decodes its stream
// (client-go's watch would add a decoding goroutine and its buffers per stream: a
// third of the goroutines of a fleet), and the HTTP/2 stream's own.
//
// The channel it returns is closed once every watch has listed its kind.
func (c *ClusterCache) watchPlane(ctx context.Context, e *entry) (<-chan struct{}, error) {
	cfg := rest.CopyConfig(e.config)
	cfg.NegotiatedSerializer = metascheme.Codecs.WithoutConversion()
	rc, err := rest.UnversionedRESTClientForConfigAndClient(cfg, e.watchHTTP)
	if err != nil {
		return nil, err
	}
	listed := make(chan struct{})
	var unlisted atomic.Int32
	unlisted.Store(int32(len(WatchedResources)))
	selector := ""
	if c.WatchSelector != nil {
		selector = c.WatchSelector.String()
	}
	for _, gvr := range WatchedResources {
		sel := selector
		if unscoped(gvr) {
			sel = ""
		}
		resource := gvr.Resource
		initial := true
		w := &kindWatch{src: planeKind{rc: rc, path: resourcePath(gvr)}, selector: sel, changed: func(event string) {
			switch {
			case event == WatchListed && initial:
				// The watches' first lists: watch waits for them, and its caller reads
				// the plane after (a list it did not wait for still counts, so a read
				// marked before it does not settle the plane).
				initial = false
				c.count(e)
			case event != WatchExpired:
				c.changed(e)
			}
			if c.OnWatchEvent != nil {
				c.OnWatchEvent(resource, event)
			}
		}, listed: func() {
			if unlisted.Add(-1) == 0 {
				close(listed)
			}
		}}
		go w.run(ctx, func(err error) {
			c.Log.V(1).Info("watching the plane failed; retrying", "plane", e.key, "resource", gvr.Resource, "error", err.Error())
		})
	}
	return listed, nil
}

// unscoped kinds are watched whoever labelled them.
func unscoped(gvr schema.GroupVersionResource) bool {
	return gvr.Resource == "namespaces" || gvr.Resource == "mutatingadmissionpolicybindings"
}

func resourcePath(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return "/api/" + gvr.Version + "/" + gvr.Resource
	}
	return "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// kindSource lists and watches one kind of a plane.
type kindSource interface {
	// list returns the collection's resource version.
	list(ctx context.Context, opts metav1.ListOptions) (string, error)
	// watch returns the watch's stream of JSON events.
	watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error)
}

// planeKind is a kindSource over the plane's API, asking for metadata only.
type planeKind struct {
	rc   rest.Interface
	path string
}

const (
	metadataListJSON = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
	metadataJSON     = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
)

func (k planeKind) list(ctx context.Context, opts metav1.ListOptions) (string, error) {
	raw, err := k.rc.Get().AbsPath(k.path).SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.Unversioned).
		SetHeader("Accept", metadataListJSON).Do(ctx).Raw()
	if err != nil {
		return "", err
	}
	var l objectVersion
	if err := json.Unmarshal(raw, &l); err != nil {
		return "", fmt.Errorf("decoding the list of %s: %w", k.path, err)
	}
	return l.Metadata.ResourceVersion, nil
}

func (k planeKind) watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	opts.Watch = true
	return k.rc.Get().AbsPath(k.path).SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.Unversioned).
		SetHeader("Accept", metadataJSON).Stream(ctx)
}

// objectVersion is what the operator reads of an object, a list or a bookmark.
type objectVersion struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

// kindWatch follows one kind of a plane from a resource version on.
type kindWatch struct {
	src      kindSource
	selector string
	// changed is told each list (WatchListed), each change (the event's type), and each
	// version found too old (WatchExpired, before the list it leads to).
	changed func(event string)
	// listed, when set, is called once, after the first list (or the answer that the
	// kind is not served).
	listed func()
}

// run lists (one item: only the collection's version is wanted) and watches from there,
// reopening the watch from the last version seen, and listing again when that version
// is too old. Each list calls changed: what happened while nothing watched is read by
// the reconcile it starts, so no change falls between the operator's last read and the
// first event. A kind the plane does not serve (a version without mutating admission
// policies) is not watched: there is nothing of it to change.
//
// A watch goroutine spends nearly all its life blocked reading its stream, and the
// runtime keeps a goroutine's stack at up to four times the depth it rests at (a
// collection halves a stack only while less than a quarter of it is used, counting a
// fixed reserve). So what lies on the resting path (run, follow, the read) keeps small
// frames: listing, opening a watch and decoding an event are done in functions that
// return before the next read, and a fleet's watch goroutines rest on the smallest
// stacks.
func (w *kindWatch) run(ctx context.Context, failed func(error)) {
	l := &watchLoop{w: w, ctx: ctx, failed: failed, retry: time.Second, first: w.listed}
	for ctx.Err() == nil {
		s, served := l.open()
		if !served {
			return
		}
		if s == nil {
			continue
		}
		opened := time.Now()
		rv, ended := w.follow(s, l.rv)
		if ctx.Err() != nil {
			return
		}
		l.ended(rv, opened, ended)
	}
}

// watchLoop is a kindWatch's state between watches.
type watchLoop struct {
	w      *kindWatch
	ctx    context.Context
	failed func(error)
	// rv is the version to watch from; "" to list first.
	rv    string
	retry time.Duration
	// first is the kindWatch's listed, until called.
	first func()
}

// open lists the kind when there is no version to watch from, then opens a watch. It
// returns the watch's stream, or nil after waiting to try again; served is false when
// the plane does not serve the kind.
func (l *watchLoop) open() (s io.ReadCloser, served bool) {
	w := l.w
	if l.rv == "" {
		v, err := w.src.list(l.ctx, metav1.ListOptions{LabelSelector: w.selector, Limit: 1})
		if apierrors.IsNotFound(err) {
			w.changed(WatchListed)
			l.listed()
			return nil, false
		}
		if err == nil && v == "" {
			err = errors.New("the list has no resource version")
		}
		if err != nil {
			l.wait(err)
			return nil, true
		}
		l.rv = v
		w.changed(WatchListed)
		l.listed()
	}
	timeout := int64(watchTimeout.Seconds() * (1 + rand.Float64()))
	s, err := w.src.watch(l.ctx, metav1.ListOptions{LabelSelector: w.selector, ResourceVersion: l.rv,
		AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
	if err != nil {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			l.rv = ""
			w.changed(WatchExpired)
		}
		l.wait(err)
		return nil, true
	}
	l.retry = time.Second
	return s, true
}

// ended takes what follow returned for a watch opened at opened.
func (l *watchLoop) ended(rv string, opened time.Time, err error) {
	l.rv = rv
	if err == nil && time.Since(opened) < time.Second {
		// Not the API server's timeout: something ends the stream at once.
		err = errors.New("the watch ended as soon as it opened")
	}
	if err != nil {
		l.wait(err)
	}
}

func (l *watchLoop) listed() {
	if l.first != nil {
		l.first()
		l.first = nil
	}
}

// wait reports err and waits before the next try, backing off up to watchRetryMax.
func (l *watchLoop) wait(err error) {
	l.failed(err)
	d := time.Duration(float64(l.retry) * (0.5 + rand.Float64()))
	l.retry = min(2*l.retry, watchRetryMax)
	select {
	case <-l.ctx.Done():
	case <-time.After(d):
	}
}

// watchEvent is one event of a watch stream (metav1.WatchEvent, its object left raw).
type watchEvent struct {
	Type   watch.EventType `json:"type"`
	Object json.RawMessage `json:"object"`
}

// follow reads one watch to its end and returns the last version seen ("" when it is
// too old to resume from) and why the watch ended, if not by its timeout.
//
// Between events it waits on a one-byte read, and decodes each event with a decoder of
// its own (event): a fleet's watches spend minutes between events, and a decoder kept
// across them keeps its buffer (thousands of watches, a kilobyte or more each).
func (w *kindWatch) follow(s io.ReadCloser, rv string) (string, error) {
	defer s.Close()
	var pending []byte
	for {
		if len(pending) == 0 {
			first := make([]byte, 1)
			n, err := s.Read(first)
			if n == 0 {
				if err == nil {
					continue
				}
				if errors.Is(err, io.EOF) {
					return rv, nil
				}
				return rv, err
			}
			pending = first[:n]
		}
		var err error
		if pending, rv, err = w.event(pending, s, rv); err != nil {
			if errors.Is(err, io.EOF) {
				return rv, nil
			}
			return rv, err
		}
	}
}

// event decodes the event that starts with pending and continues in s, tells changed,
// and returns what was read past it, the last version seen, and an error when the
// stream ends or says the watch is over.
func (w *kindWatch) event(pending []byte, s io.Reader, rv string) ([]byte, string, error) {
	dec := json.NewDecoder(io.MultiReader(bytes.NewReader(pending), s))
	var ev watchEvent
	if err := dec.Decode(&ev); err != nil {
		return nil, rv, err
	}
	// What the decoder read past the event is the start of the next one.
	rest, _ := io.ReadAll(dec.Buffered())
	pending = bytes.TrimLeft(rest, " \t\r\n")
	switch ev.Type {
	case watch.Error:
		var status metav1.Status
		if err := json.Unmarshal(ev.Object, &status); err != nil {
			return nil, rv, fmt.Errorf("decoding a watch error: %w", err)
		}
		err := apierrors.FromObject(&status)
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			w.changed(WatchExpired)
			return nil, "", err
		}
		return nil, rv, err
	case watch.Added, watch.Modified, watch.Deleted:
		w.changed(string(ev.Type))
		fallthrough
	case watch.Bookmark:
		var o objectVersion
		if err := json.Unmarshal(ev.Object, &o); err != nil {
			return nil, rv, fmt.Errorf("decoding a watch event: %w", err)
		}
		if o.Metadata.ResourceVersion != "" {
			rv = o.Metadata.ResourceVersion
		}
	}
	return pending, rv, nil
}
