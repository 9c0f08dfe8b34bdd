package remote

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	toolscache "k8s.io/client-go/tools/cache"
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

// WatchListed is what a plane's watches tell OnWatchEvent when they list their kind (or
// find it not served), besides the events' own types.
const WatchListed = "LISTED"

// watchPlane runs one watch per watched kind of the plane until ctx ends, each a
// client-go reflector over the plane's metadata API into a kindSignal, which keeps
// nothing: a plane's watches only say "something of this plane changed", and the
// operator then reads the plane directly.
//
// The channel it returns is closed once every watch has listed its kind.
func (c *ClusterCache) watchPlane(ctx context.Context, e *entry) (<-chan struct{}, error) {
	meta, err := metadata.NewForConfigAndClient(e.config, e.watchHTTP)
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
		k := &kindSignal{changed: func(event string, first bool) {
			if first {
				// The watches' first lists are waited for by Get, whose caller reads the
				// plane after (a list it did not wait for still counts, so a read marked
				// before it does not settle the plane).
				c.count(e)
			} else {
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
		go k.run(ctx, meta.Resource(gvr), e.key.String()+" "+resource, sel, func(err error) {
			c.Log.V(1).Info("watching the plane failed; retrying", "plane", e.key, "resource", resource, "error", err.Error())
		})
	}
	return listed, nil
}

// unscoped kinds are watched whoever labelled them.
func unscoped(gvr schema.GroupVersionResource) bool {
	return gvr.Resource == "namespaces" || gvr.Resource == "mutatingadmissionpolicybindings"
}

// kindSignal is the store of one kind's reflector: it keeps no object, and turns what
// the reflector delivers into signals.
type kindSignal struct {
	// changed is told each list (WatchListed; first for the first one) and each change
	// (the event's type): a list after the first is news too, what happened while
	// nothing watched.
	changed func(event string, first bool)
	// listed is called once, after the first list (or the answer that the kind is not
	// served).
	listed func()

	mu    sync.Mutex
	lists int
}

// run lists and watches the kind until ctx ends, listing again (and so telling changed)
// whenever the reflector must: after a failed watch it cannot resume, or a version too
// old. A kind the plane does not serve (a version without mutating admission policies)
// is not watched: there is nothing of it to change.
func (k *kindSignal) run(ctx context.Context, res metadata.ResourceInterface, name, selector string, failed func(error)) {
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return res.Watch(ctx, o)
		},
	}
	reflector := toolscache.NewReflectorWithOptions(lw, &metav1.PartialObjectMetadata{}, k,
		toolscache.ReflectorOptions{Name: "plane " + name, TypeDescription: "metadata"})
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		err := reflector.ListAndWatchWithContext(ctx)
		switch {
		case ctx.Err() != nil:
		case apierrors.IsNotFound(err):
			_ = k.Replace(nil, "")
			<-ctx.Done()
		case err != nil:
			failed(err)
		}
	}, time.Second, 1.0, true)
}

// The reflector's store (toolscache.ReflectorStore).

func (k *kindSignal) Add(any) error    { k.changed(string(watch.Added), false); return nil }
func (k *kindSignal) Update(any) error { k.changed(string(watch.Modified), false); return nil }
func (k *kindSignal) Delete(any) error { k.changed(string(watch.Deleted), false); return nil }
func (k *kindSignal) Resync() error    { return nil }

// Replace is a list: the first one is waited for, each later one is news.
func (k *kindSignal) Replace([]any, string) error {
	k.mu.Lock()
	k.lists++
	first := k.lists == 1
	k.mu.Unlock()
	k.changed(WatchListed, first)
	if first {
		k.listed()
	}
	return nil
}
