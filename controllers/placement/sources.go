package placement

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// sourceErrors lists every chart source or dependency of a placement release outside
// the namespaces it may use: its own and, for chart sources, those its class lists.
// Flux reads a source with its own namespace's credentials (a HelmChart built from
// spec.chart is created in the source's namespace), so a source in another tenant's
// namespace installs that tenant's private chart into this plane. Pure.
func sourceErrors(obj map[string]any, namespace string, allowed []string) field.ErrorList {
	var errs field.ErrorList
	sources := append([]string{namespace}, allowed...)
	check := func(p *field.Path, v any, ok []string, why string) {
		ns, _ := v.(string)
		if ns != "" && !slices.Contains(ok, ns) {
			errs = append(errs, field.NotSupported(p, ns, ok))
			errs[len(errs)-1].Detail += "; " + why
		}
	}
	const sourceWhy = "a placement release's chart comes from its own namespace or one its ComputePlaneClass lists in spec.placementReleases.sourceNamespaces"
	check(field.NewPath("spec", "chartRef", "namespace"), nested(obj, "spec", "chartRef", "namespace"), sources, sourceWhy)
	check(field.NewPath("spec", "chart", "spec", "sourceRef", "namespace"), nested(obj, "spec", "chart", "spec", "sourceRef", "namespace"), sources, sourceWhy)
	deps, _ := nested(obj, "spec", "dependsOn").([]any)
	for i, d := range deps {
		dep, _ := d.(map[string]any)
		check(field.NewPath("spec", "dependsOn").Index(i).Child("namespace"), dep["namespace"], []string{namespace},
			"a placement release depends only on releases of its own namespace")
	}
	return errs
}

// newErrors keeps the errors of now that were not already in before: an update is
// refused for what it introduces, not for what was stored before a rule existed (Flux's
// and the operator's own updates of such a release must go through; the placement
// controller reports and suspends it).
func newErrors(now, before field.ErrorList) field.ErrorList {
	seen := map[string]bool{}
	for _, e := range before {
		seen[e.Error()] = true
	}
	var out field.ErrorList
	for _, e := range now {
		if !seen[e.Error()] {
			out = append(out, e)
		}
	}
	return out
}
