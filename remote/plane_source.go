package remote

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Source is what the planes' watches see, as a source for the controller that
// reconciles them (as Cluster API's clustercache.GetClusterSource): a request for a
// plane whenever something its watches follow (WatchedResources) changes, and each time
// they list again. Calling it makes every plane the cache connects to watched; before
// the controller starts there is nothing to tell (it reconciles every plane when it
// does).
func (c *ClusterCache) Source() source.Source {
	c.init()
	c.mu.Lock()
	c.sourced = true
	c.mu.Unlock()
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.queues = append(c.queues, q)
		return nil
	})
}
