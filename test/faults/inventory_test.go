package faults

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// skipped are kinds whose objects are no one's inventory: records of what happened,
// leases with per-process names, and endpoints the apiservers keep.
var skipped = map[string]bool{
	"events": true, "leases": true, "componentstatuses": true,
	"endpoints": true, "endpointslices": true,
}

// hashSuffix is the content hash some names end in (it covers the plane's namespace).
var hashSuffix = regexp.MustCompile(`-[0-9a-f]{8}$`)

// inventory lists, as "resource namespace/name", every object a plane has on the
// management cluster (all in its tenant and infrastructure namespaces, and the
// cluster-scoped ones carrying its UID) and every object in the plane's own apiserver,
// with the plane's namespaces and UID made generic: two planes provisioned alike have
// equal inventories, and one with a duplicate or an orphan does not.
func inventory(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, plane *rest.Config) (management, inPlane []string) {
	t.Helper()
	generic := strings.NewReplacer(p.Namespace, "<tenant-ns>", p.Status.InfrastructureNamespace, "<infra-ns>", string(p.UID), "<uid>")
	management = list(t, ctx, mgmt.Config, func(namespaced bool, ns string) bool {
		return !namespaced || ns == p.Namespace || ns == p.Status.InfrastructureNamespace
	}, cpv1.PlaneUIDLabel+"="+string(p.UID), generic)
	inPlane = list(t, ctx, plane, func(bool, string) bool { return true }, "", generic)
	return management, inPlane
}

// list lists every listable resource; clusterSelector narrows the cluster-scoped ones.
func list(t *testing.T, ctx context.Context, cfg *rest.Config, keep func(namespaced bool, ns string) bool,
	clusterSelector string, generic *strings.Replacer) []string {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if skipped[r.Name] || strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			opts := metav1.ListOptions{}
			if !r.Namespaced {
				opts.LabelSelector = clusterSelector
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, opts)
			if err != nil {
				t.Fatalf("listing %s: %v", r.Name, err)
			}
			for _, o := range items.Items {
				if keep(r.Namespaced, o.GetNamespace()) {
					name := hashSuffix.ReplaceAllString(o.GetName(), "-<hash>")
					out = append(out, generic.Replace(fmt.Sprintf("%s.%s %s/%s", r.Name, gv.Group, o.GetNamespace(), name)))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// diff lists what one inventory has that the other has not, both ways.
func diff(want, got []string) (missing, extra []string) {
	w, g := map[string]int{}, map[string]int{}
	for _, s := range want {
		w[s]++
	}
	for _, s := range got {
		g[s]++
	}
	for s, n := range w {
		if g[s] < n {
			missing = append(missing, s)
		}
	}
	for s, n := range g {
		if w[s] < n {
			extra = append(extra, s)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return missing, extra
}

func sameInventory(t *testing.T, side string, want, got []string) {
	t.Helper()
	missing, extra := diff(want, got)
	for _, s := range missing {
		t.Errorf("%s: missing next to a plane that met no fault: %s", side, s)
	}
	for _, s := range extra {
		t.Errorf("%s: extra (a duplicate or an orphan) next to a plane that met no fault: %s", side, s)
	}
	if len(missing)+len(extra) == 0 {
		t.Logf("%s: the same %d objects as a plane that met no fault", side, len(got))
	}
}
