package controllers

import (
	"context"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/controllers/render"
)

// The operator reads two sets of HelmReleases, each scoped by its own label: the
// placement releases (a tenant's, labelled computeplane.cozystack.io/placement=true) in
// the manager's cache (CacheOptions), and the add-on releases it creates (its managed-by
// label) in a cache of their own. A cache holds one label selector per kind and a
// selector cannot say "either", so every other HelmRelease of the management cluster
// (Flux's own, other teams', a tenant's that are not placement releases) is cached by
// neither.

// addonCache is the add-on releases' cache, started and synced with the manager's.
type addonCache struct{ cache.Cache }

// GetCache puts the cache among the manager's caches: started before the controllers,
// which wait for it to sync.
func (c addonCache) GetCache() cache.Cache { return c.Cache }

func newAddonCache(mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient: mgr.GetHTTPClient(),
		Scheme:     mgr.GetScheme(),
		Mapper:     mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&helmv2.HelmRelease{}: {Label: labels.SelectorFromSet(labels.Set{render.ManagedByLabel: render.ManagedByValue})},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, err
	}
	return c, mgr.Add(addonCache{c})
}

// addonReleases lists a namespace's add-on releases matching sel.
func (r *ComputePlaneReconciler) addonReleases(ctx context.Context, ns string, sel client.MatchingLabels) ([]helmv2.HelmRelease, error) {
	var from client.Reader = r.Client
	if r.Addons != nil {
		from = r.Addons
	}
	var hrs helmv2.HelmReleaseList
	if err := from.List(ctx, &hrs, client.InNamespace(ns), sel); err != nil {
		return nil, err
	}
	return hrs.Items, nil
}

// addonsFromTheirCache is the reconciler's client with add-on releases read from their
// cache: Apply compares what it renders with what is live, and an add-on release read
// through the manager's cache (placement releases only) would look missing and be
// applied again on every pass.
type addonsFromTheirCache struct {
	client.Client
	addons client.Reader
}

func (c addonsFromTheirCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*helmv2.HelmRelease); ok && c.addons != nil {
		return c.addons.Get(ctx, key, obj, opts...)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}
