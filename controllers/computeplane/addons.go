package computeplane

import (
	"context"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
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
			&helmv2.HelmRelease{}: {Label: labels.SelectorFromSet(labels.Set{cpv1.ManagedByLabel: cpv1.ManagedByValue})},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, err
	}
	return c, mgr.Add(addonCache{c})
}

// addonReleases lists a namespace's add-on releases matching sel.
func (r *Reconciler) addonReleases(ctx context.Context, ns string, sel client.MatchingLabels) ([]helmv2.HelmRelease, error) {
	var hrs helmv2.HelmReleaseList
	if err := r.withAddons().List(ctx, &hrs, client.InNamespace(ns), sel); err != nil {
		return nil, err
	}
	return hrs.Items, nil
}

// withAddons is the reconciler's client with every HelmRelease read (a Get, a List) made
// from the add-on cache: the only HelmReleases this reconciler reads through its client
// are its add-ons (placement releases it lists from the API server), and through the
// manager's cache, which holds placement releases only, an add-on would look missing
// (and Apply would write it again on every pass). Without an add-on cache (a reconciler
// built by hand, reading directly) it is the client itself.
func (r *Reconciler) withAddons() client.Client {
	if r.Addons == nil {
		return r.Client
	}
	return addonsFromTheirCache{Client: r.Client, addons: r.Addons}
}

type addonsFromTheirCache struct {
	client.Client
	addons client.Reader
}

func (c addonsFromTheirCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*helmv2.HelmRelease); ok {
		return c.addons.Get(ctx, key, obj, opts...)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c addonsFromTheirCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*helmv2.HelmReleaseList); ok {
		return c.addons.List(ctx, list, opts...)
	}
	return c.Client.List(ctx, list, opts...)
}
