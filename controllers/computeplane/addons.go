package computeplane

import (
	"context"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
			&helmv2.HelmRelease{}: {Label: labels.SelectorFromSet(labels.Set{cpv1.ManagedByLabel: cpv1.ManagedByValue}), Transform: addonIdentity},
		},
	})
	if err != nil {
		return nil, err
	}
	return c, mgr.Add(addonCache{c})
}

// addonLabels are the labels of an add-on release the operator reads (render.Addons sets
// them): what its lists select by.
var addonLabels = []string{cpv1.PlaneNameLabel, cpv1.PlaneNamespaceLabel, cpv1.PlaneUIDLabel, cpv1.ManagedByLabel, cpv1.AddonRoleLabel}

// maxAddonMessage bounds the Ready message an add-on release keeps in the cache.
const maxAddonMessage = 1024

// addonIdentity keeps of a HelmRelease in the add-on cache what the operator reads from
// it: its identity with the operator's own labels, its release name, whether it is
// suspended, and Flux's Ready condition (addonSummary). The cache's label selects what anyone labels managed-by the
// operator, a tenant's HelmReleases in its own namespace too, with whatever values,
// annotations or post-renderers it gives them: none of that is kept, so what a tenant can
// make the cache hold is a few hundred bytes an object. Applying an add-on compares it
// with a full read from the API server when its version is not one already found to
// match (ContentlessKinds), as for the other kinds the cache holds without content.
func addonIdentity(obj any) (any, error) {
	hr, ok := obj.(*helmv2.HelmRelease)
	if !ok {
		return obj, nil
	}
	out := &helmv2.HelmRelease{TypeMeta: hr.TypeMeta, ObjectMeta: identity(hr.ObjectMeta)}
	out.Labels = nil
	for _, k := range addonLabels {
		if v, ok := hr.Labels[k]; ok {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[k] = v
		}
	}
	// The teardown suspends an add-on before deleting it, once: it reads whether it is.
	out.Spec.ReleaseName, out.Spec.Suspend = hr.Spec.ReleaseName, hr.Spec.Suspend
	out.Status.ObservedGeneration = hr.Status.ObservedGeneration
	if c := apimeta.FindStatusCondition(hr.Status.Conditions, fluxmeta.ReadyCondition); c != nil {
		ready := *c
		if len(ready.Message) > maxAddonMessage {
			ready.Message = ready.Message[:maxAddonMessage] + "…"
		}
		out.Status.Conditions = []metav1.Condition{ready}
	}
	return out, nil
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
