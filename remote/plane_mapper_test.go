package remote

import (
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
