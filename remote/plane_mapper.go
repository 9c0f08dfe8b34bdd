package remote

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"weak"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// planeMapper is a plane's RESTMapper that asks the plane's discovery for one
// group-version at a time, when the operator first uses a kind of it, and keeps only
// that group-version's resources. controller-runtime's dynamic mapper loads the plane's
// whole aggregated discovery (every group, a few hundred kilobytes of maps per plane)
// although the operator uses a handful of built-in groups; with hundreds of planes
// that was the largest part of the manager's heap. A kind the plane does not serve is
// a NoKindMatchError, as with the dynamic mapper (and looked up again after a minute).
type planeMapper struct {
	disco discovery.DiscoveryInterface

	mu  sync.Mutex
	gvs map[schema.GroupVersion]*servedResources
}

type servedResources struct {
	// set holds the group-version's resources (no subresources); nil when the plane
	// does not serve the group-version.
	set *servedSet
	// missingAt is when the plane answered that it does not serve it.
	missingAt time.Time
}

// servedSet is a group-version's resources as a plane serves them, by kind.
type servedSet struct {
	byKind map[string]servedResource
}

// servedResource is what mapping reads of a discovered resource (a metav1.APIResource
// also keeps verbs, short names and categories: most of a plane's mapper).
type servedResource struct {
	name, singular string
	namespaced     bool
}

const missingRecheck = time.Minute

func newPlaneMapper(disco discovery.DiscoveryInterface) *planeMapper {
	return &planeMapper{disco: disco, gvs: map[schema.GroupVersion]*servedResources{}}
}

func (m *planeMapper) resources(gv schema.GroupVersion) (map[string]servedResource, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.gvs[gv]; s != nil && (s.set != nil || time.Since(s.missingAt) < missingRecheck) {
		if s.set == nil {
			return nil, nil
		}
		return s.set.byKind, nil
	}
	list, err := m.disco.ServerResourcesForGroupVersion(gv.String())
	if apierrors.IsNotFound(err) {
		m.gvs[gv] = &servedResources{missingAt: time.Now()}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	byKind := map[string]servedResource{}
	for _, r := range list.APIResources {
		if !strings.Contains(r.Name, "/") {
			byKind[r.Kind] = servedResource{name: r.Name, singular: r.SingularName, namespaced: r.Namespaced}
		}
	}
	set := sharedServedSet(gv, byKind)
	m.gvs[gv] = &servedResources{set: set}
	return set.byKind, nil
}

// servedSets lets planes that serve a group-version alike share one servedSet: planes of
// one Kubernetes version serve the same built-in group-versions, which is what the
// operator maps, so a fleet keeps a handful of sets instead of one per plane and
// group-version (a few kilobytes per plane). A set no plane's mapper holds any more is
// left to the collector (a weak reference), so what planes serve cannot grow it for good.
var servedSets = struct {
	sync.Mutex
	byContent map[string]weak.Pointer[servedSet]
}{byContent: map[string]weak.Pointer[servedSet]{}}

func sharedServedSet(gv schema.GroupVersion, byKind map[string]servedResource) *servedSet {
	key := servedSetKey(gv, byKind)
	servedSets.Lock()
	defer servedSets.Unlock()
	if s := servedSets.byContent[key].Value(); s != nil {
		return s
	}
	for k, p := range servedSets.byContent {
		if p.Value() == nil {
			delete(servedSets.byContent, k)
		}
	}
	s := &servedSet{byKind: byKind}
	servedSets.byContent[key] = weak.Make(s)
	return s
}

// servedSetKey names a group-version's resources by their whole content.
func servedSetKey(gv schema.GroupVersion, byKind map[string]servedResource) string {
	var b strings.Builder
	b.WriteString(gv.String())
	for _, kind := range slices.Sorted(maps.Keys(byKind)) {
		r := byKind[kind]
		fmt.Fprintf(&b, "\n%s %s %s %t", kind, r.name, r.singular, r.namespaced)
	}
	return b.String()
}

func (m *planeMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) == 0 {
		return nil, fmt.Errorf("mapping %s: the plane's mapper needs a version", gk)
	}
	for _, v := range versions {
		gv := schema.GroupVersion{Group: gk.Group, Version: v}
		byKind, err := m.resources(gv)
		if err != nil {
			return nil, err
		}
		if r, ok := byKind[gk.Kind]; ok {
			scope := meta.RESTScopeRoot
			if r.namespaced {
				scope = meta.RESTScopeNamespace
			}
			return &meta.RESTMapping{Resource: gv.WithResource(r.name), GroupVersionKind: gv.WithKind(gk.Kind), Scope: scope}, nil
		}
	}
	return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
}

func (m *planeMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	mapping, err := m.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	return []*meta.RESTMapping{mapping}, nil
}

// find returns the kind and resource a fully qualified GroupVersionResource names
// (plural or singular).
func (m *planeMapper) find(resource schema.GroupVersionResource) (string, servedResource, error) {
	if resource.Version == "" {
		return "", servedResource{}, fmt.Errorf("mapping %s: the plane's mapper needs a version", resource)
	}
	byKind, err := m.resources(resource.GroupVersion())
	if err != nil {
		return "", servedResource{}, err
	}
	for kind, r := range byKind {
		if r.name == resource.Resource || r.singular == resource.Resource {
			return kind, r, nil
		}
	}
	return "", servedResource{}, &meta.NoResourceMatchError{PartialResource: resource}
}

func (m *planeMapper) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	kind, _, err := m.find(resource)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	return resource.GroupVersion().WithKind(kind), nil
}

func (m *planeMapper) KindsFor(resource schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	gvk, err := m.KindFor(resource)
	if err != nil {
		return nil, err
	}
	return []schema.GroupVersionKind{gvk}, nil
}

func (m *planeMapper) ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	_, r, err := m.find(input)
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	return input.GroupVersion().WithResource(r.name), nil
}

func (m *planeMapper) ResourcesFor(input schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	gvr, err := m.ResourceFor(input)
	if err != nil {
		return nil, err
	}
	return []schema.GroupVersionResource{gvr}, nil
}

func (m *planeMapper) ResourceSingularizer(resource string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.gvs {
		if s.set == nil {
			continue
		}
		for _, r := range s.set.byKind {
			if r.name == resource && r.singular != "" {
				return r.singular, nil
			}
		}
	}
	return "", fmt.Errorf("no singular name known for %q", resource)
}

var _ meta.RESTMapper = &planeMapper{}
