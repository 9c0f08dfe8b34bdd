package placement

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"gomodules.xyz/jsonpatch/v2"

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

// routingOps are the JSON patch operations that fill in the routing a placement release
// leaves out; what it sets is left for routingErrors to judge. It reads the JSON object
// and writes nothing: admission patches by fields, so it never re-encodes a release (nor
// its values, which it never decodes), and fields this build does not know are neither
// lost nor overlooked. Pure.
func routingOps(obj map[string]any, r placementRoute) []jsonpatch.Operation {
	var ops []jsonpatch.Operation
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec", map[string]any{}))
	}
	if _, ok := spec["kubeConfig"]; !ok {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/kubeConfig",
			map[string]any{"secretRef": map[string]any{"name": r.secret, "key": cpv1.ApplierKubeconfigKey}}))
	}
	for _, f := range []struct{ key, value string }{
		{"serviceAccountName", cpv1.DeployerName},
		{"storageNamespace", r.namespace},
		{"targetNamespace", r.namespace},
		// Hooks post-rendered with the rest, whatever the helm-controller's defaults
		// (its UseHelm3Defaults gate leaves them out): they carry Flux's origin labels,
		// by which what the uninstall leaves of them is found and removed.
		{"postRenderStrategy", "combined"},
	} {
		if v, _ := spec[f.key].(string); v == "" {
			// add replaces a member that is there (an empty string, a null).
			ops = append(ops, jsonpatch.NewOperation("add", "/spec/"+f.key, f.value))
		}
	}
	switch install, ok := spec["install"].(map[string]any); {
	case !ok:
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/install", map[string]any{"createNamespace": false}))
	default:
		if _, ok := install["createNamespace"]; !ok {
			ops = append(ops, jsonpatch.NewOperation("add", "/spec/install/createNamespace", false))
		}
	}
	return ops
}

// labelOp is the JSON patch operation that gives an object a label it lacks (none when
// it has it). Every object admission sees has metadata (its name). Pure.
func labelOp(obj map[string]any, label, value string) []jsonpatch.Operation {
	labels, ok := nested(obj, "metadata", "labels").(map[string]any)
	switch {
	case !ok:
		return []jsonpatch.Operation{jsonpatch.NewOperation("add", "/metadata/labels", map[string]any{label: value})}
	case labels[label] != value:
		return []jsonpatch.Operation{jsonpatch.NewOperation("add", "/metadata/labels/"+pointerEscape(label), value)}
	}
	return nil
}

// finalizerOp is the JSON patch operation that adds a finalizer an object lacks. Pure.
func finalizerOp(obj map[string]any, finalizer string) []jsonpatch.Operation {
	finalizers, ok := nested(obj, "metadata", "finalizers").([]any)
	switch {
	case !ok:
		return []jsonpatch.Operation{jsonpatch.NewOperation("add", "/metadata/finalizers", []any{finalizer})}
	case !containsAny(finalizers, finalizer):
		return []jsonpatch.Operation{jsonpatch.NewOperation("add", "/metadata/finalizers/-", finalizer)}
	}
	return nil
}

// pointerEscape escapes a key for a JSON pointer (RFC 6901).
func pointerEscape(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

// helmResourcePolicy is Helm's annotation that keeps an object when its release is
// uninstalled ("keep").
const helmResourcePolicy = "helm.sh/resource-policy"

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
	if st, ok := nested(obj, "spec", "postRenderStrategy").(string); ok && st != "combined" && st != "separate" {
		errs = append(errs, field.NotSupported(spec.Child("postRenderStrategy"), st, []string{"combined", "separate"}))
		errs[len(errs)-1].Detail += "; without post-rendering, the hooks' objects would lack the origin labels by which what Helm's uninstall leaves is removed from the plane"
	}
	if _, ok := nested(obj, "spec", "commonMetadata", "annotations", helmResourcePolicy).(string); ok {
		errs = append(errs, field.Forbidden(spec.Child("commonMetadata", "annotations").Key(helmResourcePolicy),
			"on every object of the release, it keeps them all in the plane past the uninstall the placement finalizer waits for"))
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
