package remote

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
)

// WatchedResources are the kinds of a plane the operator reacts to at once: everything
// its hardening and identities read (a namespace created or relabelled, a policy or
// binding deleted, a mutating policy created). Namespaces and mutating admission
// policies are watched in full (the operator creates none of the latter: any is a
// finding), the others through WatchSelector. Nothing a full read looks at is left
// unwatched, so a plane whose watches saw nothing needs no full read (ClusterCache.Quiet).
var WatchedResources = []schema.GroupVersionResource{
	{Version: "v1", Resource: "namespaces"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
	{Version: "v1", Resource: "serviceaccounts"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
}

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
// only on the wire). Each kind costs one goroutine here and one decoding the stream.
func (c *ClusterCache) watchPlane(ctx context.Context, e *entry) error {
	mc, err := metadata.NewForConfigAndClient(e.config, e.watchHTTP)
	if err != nil {
		return err
	}
	selector := ""
	if c.WatchSelector != nil {
		selector = c.WatchSelector.String()
	}
	for _, gvr := range WatchedResources {
		sel := selector
		if unscoped(gvr) {
			sel = ""
		}
		w := &kindWatch{ri: mc.Resource(gvr), selector: sel, changed: func() { c.changed(e) }}
		go w.run(ctx, func(err error) {
			c.Log.V(1).Info("watching the plane failed; retrying", "plane", e.key, "resource", gvr.Resource, "error", err.Error())
		})
	}
	return nil
}

// unscoped kinds are watched whoever labelled them.
func unscoped(gvr schema.GroupVersionResource) bool {
	return gvr.Resource == "namespaces" || gvr.Resource == "mutatingadmissionpolicies" || gvr.Resource == "mutatingadmissionpolicybindings"
}

// kindWatch follows one kind of a plane from a resource version on.
type kindWatch struct {
	ri       metadata.ResourceInterface
	selector string
	changed  func()
}

// run lists (one item: only the collection's version is wanted) and watches from there,
// reopening the watch from the last version seen, and listing again when that version
// is too old. Each list calls changed: what happened while nothing watched is read by
// the reconcile it starts, so no change falls between the operator's last read and the
// first event. A kind the plane does not serve (a version without mutating admission
// policies) is not watched: there is nothing of it to change.
func (w *kindWatch) run(ctx context.Context, failed func(error)) {
	rv := ""
	retry := time.Second
	wait := func(err error) {
		failed(err)
		d := time.Duration(float64(retry) * (0.5 + rand.Float64()))
		retry = min(2*retry, watchRetryMax)
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	for ctx.Err() == nil {
		if rv == "" {
			list, err := w.ri.List(ctx, metav1.ListOptions{LabelSelector: w.selector, Limit: 1})
			if apierrors.IsNotFound(err) {
				w.changed()
				return
			}
			if err != nil {
				wait(err)
				continue
			}
			rv = list.ResourceVersion
			w.changed()
		}
		timeout := int64(watchTimeout.Seconds() * (1 + rand.Float64()))
		s, err := w.ri.Watch(ctx, metav1.ListOptions{LabelSelector: w.selector, ResourceVersion: rv,
			AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			wait(err)
			continue
		}
		retry = time.Second
		opened := time.Now()
		var ended error
		rv, ended = w.follow(s, rv)
		if ended == nil && time.Since(opened) < time.Second {
			// Not the API server's timeout: something ends the stream at once.
			ended = errors.New("the watch ended as soon as it opened")
		}
		if ended != nil {
			wait(ended)
		}
	}
}

// follow reads one watch to its end and returns the last version seen ("" when it is
// too old to resume from) and why the watch ended, if not by its timeout.
func (w *kindWatch) follow(s watch.Interface, rv string) (string, error) {
	defer s.Stop()
	for ev := range s.ResultChan() {
		switch ev.Type {
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return "", err
			}
			return rv, err
		case watch.Added, watch.Modified, watch.Deleted:
			w.changed()
			fallthrough
		case watch.Bookmark:
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
				rv = m.GetResourceVersion()
			}
		}
	}
	return rv, nil
}
