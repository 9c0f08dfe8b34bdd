package remote

import (
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestPlaneMapper: kinds map to their resources and scope from the one group-version
// asked for, which is fetched once; a kind or group-version the plane does not serve is
// a NoKindMatchError, as with controller-runtime's mapper.
func TestPlaneMapper(t *testing.T) {
	fake := &clienttesting.Fake{Resources: []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "namespaces", SingularName: "namespace", Kind: "Namespace"},
			{Name: "serviceaccounts", SingularName: "serviceaccount", Kind: "ServiceAccount", Namespaced: true},
			{Name: "serviceaccounts/token", Kind: "TokenRequest", Namespaced: true},
		}},
		{GroupVersion: "rbac.authorization.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "roles", SingularName: "role", Kind: "Role", Namespaced: true},
		}},
	}}
	m := newPlaneMapper(&fakediscovery.FakeDiscovery{Fake: fake})
	for _, c := range []struct {
		gk       schema.GroupKind
		version  string
		resource string
		scope    meta.RESTScopeName
	}{
		{schema.GroupKind{Kind: "Namespace"}, "v1", "namespaces", meta.RESTScopeNameRoot},
		{schema.GroupKind{Kind: "ServiceAccount"}, "v1", "serviceaccounts", meta.RESTScopeNameNamespace},
		{schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "Role"}, "v1", "roles", meta.RESTScopeNameNamespace},
	} {
		got, err := m.RESTMapping(c.gk, c.version)
		if err != nil {
			t.Fatalf("%s: %v", c.gk, err)
		}
		if got.Resource.Resource != c.resource || got.Scope.Name() != c.scope || got.GroupVersionKind != c.gk.WithVersion(c.version) {
			t.Errorf("%s maps to %+v", c.gk, got)
		}
	}
	if len(fake.Actions()) != 2 {
		t.Errorf("%d discovery requests for two group-versions, want 2", len(fake.Actions()))
	}
	for _, gk := range []schema.GroupKind{{Kind: "TokenRequest"}, {Group: "example.com", Kind: "Widget"}} {
		if _, err := m.RESTMapping(gk, "v1"); !meta.IsNoMatchError(err) {
			t.Errorf("%s: %v, want a NoKindMatchError", gk, err)
		}
	}
	if gvk, err := m.KindFor(schema.GroupVersionResource{Version: "v1", Resource: "namespace"}); err != nil || gvk.Kind != "Namespace" {
		t.Errorf("KindFor(namespace) = %v, %v", gvk, err)
	}
}

// TestPlaneMappersShareWhatPlanesServeAlike: planes that serve a group-version alike
// share one set of its resources; a plane that serves it differently gets its own; a
// set no mapper holds any more is collected.
func TestPlaneMappersShareWhatPlanesServeAlike(t *testing.T) {
	gv := schema.GroupVersion{Group: "sharing.test.example", Version: "v1"}
	served := func(kinds ...string) *fakediscovery.FakeDiscovery {
		l := &metav1.APIResourceList{GroupVersion: gv.String()}
		for _, k := range kinds {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: strings.ToLower(k) + "s", SingularName: strings.ToLower(k), Kind: k})
		}
		return &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{l}}}
	}
	set := func(m *planeMapper) *servedSet {
		if _, err := m.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: "Widget"}, gv.Version); err != nil {
			t.Fatal(err)
		}
		return m.gvs[gv].set
	}
	a, b := set(newPlaneMapper(served("Widget", "Gadget"))), set(newPlaneMapper(served("Gadget", "Widget")))
	if a != b {
		t.Error("two planes serving the same resources do not share them")
	}
	key := func() string {
		c := set(newPlaneMapper(served("Widget")))
		if a == c || len(c.byKind) != 1 {
			t.Errorf("a plane serving other resources got %v", c.byKind)
		}
		return servedSetKey(gv, c.byKind)
	}()
	runtime.GC()
	servedSets.Lock()
	defer servedSets.Unlock()
	if servedSets.byContent[key].Value() != nil {
		t.Error("a set no mapper holds is still kept")
	}
	runtime.KeepAlive(a)
}
