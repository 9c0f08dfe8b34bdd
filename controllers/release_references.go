package controllers

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
)

// applierSecretSuffix ends the name of every plane's applier kubeconfig Secret, the one
// operator credential in a tenant namespace (the admin kubeconfig lives in the plane's
// infrastructure namespace, which tenants cannot reach).
const applierSecretSuffix = "-applier-kubeconfig"

// kubeConfigSecretPath is where a placement release names its applier kubeconfig: the
// one place the operator's credential may be named, as the routing it writes itself.
const kubeConfigSecretPath = "spec.kubeConfig.secretRef.name"

// namedString is a string somewhere in a Flux object's spec, with its path.
type namedString struct{ path, value string }

// suspectNames lists every string in a Flux object's spec that could name a plane's
// applier Secret, wherever it is: kubeConfig, valuesFrom, postBuild.substituteFrom, a
// verification or decryption secretRef, a field this build has never heard of. An
// allowlist by construction: nothing but the routing may name the credential, so no
// field needs to be known to be judged. spec.values is skipped: it only feeds the
// chart, whose objects live in the plane, where no management Secret can be read.
func suspectNames(obj map[string]any) []namedString {
	spec, _ := obj["spec"].(map[string]any)
	var out []namedString
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case string:
			if strings.HasSuffix(v, applierSecretSuffix) {
				out = append(out, namedString{path, v})
			}
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if path == "spec" && k == "values" {
					continue
				}
				walk(path+"."+k, v[k])
			}
		case []any:
			for i, x := range v {
				walk(path+"["+strconv.Itoa(i)+"]", x)
			}
		}
	}
	walk("spec", spec)
	return out
}

// credentialErrors lists every place where a Flux object of kind names the applier
// Secret of one of planes, except a placement release's kubeConfig (routingErrors judges
// that one exactly). Pure.
func credentialErrors(kind string, placement bool, suspects []namedString, planes []cpv1.ComputePlane) field.ErrorList {
	var errs field.ErrorList
	for _, s := range suspects {
		i := slices.IndexFunc(planes, func(p cpv1.ComputePlane) bool { return render.ApplierSecretName(&p) == s.value })
		if i < 0 || (placement && s.path == kubeConfigSecretPath) {
			continue
		}
		what := fmt.Sprintf("names ComputePlane %s's applier kubeconfig", planes[i].Name)
		var why string
		switch {
		case kind == "HelmRelease" && s.path == kubeConfigSecretPath:
			why = fmt.Sprintf("only a placement release is applied with it, routed and held by the operator; label this release %s=%s to deploy it into the plane",
				cpv1.PlacementLabel, cpv1.PlacementLabelValue)
		case kind == "HelmRelease" && strings.HasPrefix(s.path, "spec.valuesFrom"):
			why = "the plane's credential never feeds a chart's values (they end up in the plane, where untrusted code runs)"
		default:
			why = "the plane's credential may be named only as a placement HelmRelease's spec.kubeConfig, the routing the operator writes"
		}
		errs = append(errs, field.Forbidden(pathOf(s.path), what+": "+why))
	}
	return errs
}

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

// pathOf turns "spec.valuesFrom[0].name" back into a field path for messages.
func pathOf(s string) *field.Path {
	var p *field.Path
	for _, part := range strings.Split(s, ".") {
		name, idx, _ := strings.Cut(part, "[")
		if p == nil {
			p = field.NewPath(name)
		} else {
			p = p.Child(name)
		}
		for idx != "" {
			n, rest, _ := strings.Cut(idx, "]")
			i, _ := strconv.Atoi(n)
			p = p.Index(i)
			idx = strings.TrimPrefix(rest, "[")
		}
	}
	return p
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
