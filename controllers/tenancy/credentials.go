package tenancy

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// ApplierSecretName is the plane's applier kubeconfig Secret in its tenant namespace,
// which its placement releases name as spec.kubeConfig.secretRef: the one operator
// credential a tenant namespace holds (the admin kubeconfig lives in the plane's
// infrastructure namespace, which tenants cannot reach).
func ApplierSecretName(p *cpv1.ComputePlane) string { return p.Name + cpv1.ApplierKubeconfigSuffix }

// KubeConfigSecretPath is where a placement release names its applier kubeconfig: the
// one place the operator's credential may be named, as the routing it writes itself.
const KubeConfigSecretPath = "spec.kubeConfig.secretRef.name"

// NamedString is a string somewhere in a Flux object's spec, with its path.
type NamedString struct{ Path, Value string }

// SuspectNames lists every string in a Flux object's spec that could name a plane's
// applier Secret, wherever it is: kubeConfig, valuesFrom, postBuild.substituteFrom, a
// verification or decryption secretRef, a field this build has never heard of. An
// allowlist by construction: nothing but the routing may name the credential, so no
// field needs to be known to be judged. spec.values is skipped: it only feeds the
// chart, whose objects live in the plane, where no management Secret can be read.
func SuspectNames(obj map[string]any) []NamedString {
	spec, _ := obj["spec"].(map[string]any)
	var out []NamedString
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case string:
			if strings.HasSuffix(v, cpv1.ApplierKubeconfigSuffix) {
				out = append(out, NamedString{path, v})
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

// CredentialErrors lists every place where a Flux object of kind names the applier
// Secret of one of planes, except a placement release's kubeConfig (the placement webhook
// judges that one exactly). Pure.
func CredentialErrors(kind string, placement bool, suspects []NamedString, planes []cpv1.ComputePlane) field.ErrorList {
	var errs field.ErrorList
	for _, s := range suspects {
		i := slices.IndexFunc(planes, func(p cpv1.ComputePlane) bool { return ApplierSecretName(&p) == s.Value })
		if i < 0 || (placement && s.Path == KubeConfigSecretPath) {
			continue
		}
		what := fmt.Sprintf("names ComputePlane %s's applier kubeconfig", planes[i].Name)
		var why string
		switch {
		case kind == "HelmRelease" && s.Path == KubeConfigSecretPath:
			why = fmt.Sprintf("only a placement release is applied with it, routed and held by the operator; label this release %s=%s to deploy it into the plane",
				cpv1.PlacementLabel, cpv1.PlacementLabelValue)
		case kind == "HelmRelease" && strings.HasPrefix(s.Path, "spec.valuesFrom"):
			why = "the plane's credential never feeds a chart's values (they end up in the plane, where untrusted code runs)"
		default:
			why = "the plane's credential may be named only as a placement HelmRelease's spec.kubeConfig, the routing the operator writes"
		}
		errs = append(errs, field.Forbidden(pathOf(s.Path), what+": "+why))
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
