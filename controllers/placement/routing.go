package placement

import (
	"fmt"
	"reflect"
	"sort"

	"k8s.io/apimachinery/pkg/util/validation/field"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

// placementRoute is where, and as whom, the placement releases of a plane's namespace
// are applied: into the plane, with the applier kubeconfig, as the deployer, into the
// namespace named like theirs or one of the plane's placement namespaces, with Helm's
// release records in their own namespace.
type placementRoute struct {
	namespace string
	secret    string
	targets   []string
}

func routeFor(p *cpv1.ComputePlane) placementRoute {
	targets := tenancy.PlacementNamespaces(p)
	sort.Strings(targets)
	return placementRoute{namespace: p.Namespace, secret: tenancy.ApplierSecretName(p), targets: targets}
}

// isPlacement reports whether a HelmRelease (as a JSON object) is a placement release.
func isPlacement(obj map[string]any) bool { return tenancy.IsPlacement(stringLabels(obj)) }

// routeRelease fills in the routing a placement release leaves out; what it sets is
// left for routingErrors to judge. It works on the JSON object, not Flux's Go types, so
// fields this build does not know are neither lost nor overlooked.
func routeRelease(obj map[string]any, r placementRoute) {
	spec := ensureMap(obj, "spec")
	if _, ok := spec["kubeConfig"]; !ok {
		spec["kubeConfig"] = map[string]any{"secretRef": map[string]any{"name": r.secret, "key": cpv1.ApplierKubeconfigKey}}
	}
	for key, value := range map[string]string{
		"serviceAccountName": cpv1.DeployerName,
		"targetNamespace":    r.namespace,
		"storageNamespace":   r.namespace,
	} {
		if v, _ := spec[key].(string); v == "" {
			spec[key] = value
		}
	}
	install := ensureMap(spec, "install")
	if _, ok := install["createNamespace"]; !ok {
		install["createNamespace"] = false
	}
}

// routingErrors lists every way a placement release is not routed as it must be, each
// with what is allowed. It is pure.
func routingErrors(obj map[string]any, r placementRoute) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	want := map[string]any{"secretRef": map[string]any{"name": r.secret, "key": cpv1.ApplierKubeconfigKey}}
	if kc := nested(obj, "spec", "kubeConfig"); !reflect.DeepEqual(kc, want) {
		errs = append(errs, field.Invalid(spec.Child("kubeConfig"), kc, fmt.Sprintf(
			"must be {secretRef: {name: %s, key: %s}} (the ComputePlane's applier kubeconfig) or left out", r.secret, cpv1.ApplierKubeconfigKey)))
	}
	if sa := nested(obj, "spec", "serviceAccountName"); sa != cpv1.DeployerName {
		errs = append(errs, field.NotSupported(spec.Child("serviceAccountName"), sa, []string{cpv1.DeployerName}))
	}
	target, _ := nested(obj, "spec", "targetNamespace").(string)
	if !contains(r.targets, target) {
		errs = append(errs, field.NotSupported(spec.Child("targetNamespace"), target, r.targets))
	}
	if st := nested(obj, "spec", "storageNamespace"); st != r.namespace {
		errs = append(errs, field.NotSupported(spec.Child("storageNamespace"), st, []string{r.namespace}))
	}
	if cn := nested(obj, "spec", "install", "createNamespace"); cn != nil && cn != false {
		errs = append(errs, field.Forbidden(spec.Child("install", "createNamespace"),
			"the operator pre-creates placement namespaces, hardened; Flux must not create any"))
	}
	if pr, _ := nested(obj, "spec", "postRenderers").([]any); len(pr) > 0 {
		errs = append(errs, field.Forbidden(spec.Child("postRenderers"),
			"post-renderers could change where, and as whom, the rendered objects are applied; use the chart's values"))
	}
	if dp, ok := nested(obj, "spec", "uninstall", "deletionPropagation").(string); ok && dp != "background" && dp != "foreground" {
		errs = append(errs, field.NotSupported(spec.Child("uninstall", "deletionPropagation"), dp, []string{"background", "foreground"}))
		errs[len(errs)-1].Detail += "; an uninstall that orphans the release's pods would leave its workload running in the plane"
	}
	return errs
}

func nested(obj map[string]any, path ...string) any {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func ensureMap(obj map[string]any, key string) map[string]any {
	m, ok := obj[key].(map[string]any)
	if !ok {
		m = map[string]any{}
		obj[key] = m
	}
	return m
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
