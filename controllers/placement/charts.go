package placement

import (
	"context"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// chartTemplate is where Flux creates the HelmChart of a release with a chart template
// (spec.chart): <namespace>-<name>, in the source's namespace (the release's own when
// the source names none). ok is false for a release without one.
func chartTemplate(obj map[string]any, namespace, name string) (chartNamespace, chartName string, ok bool) {
	if _, ok := nested(obj, "spec", "chart").(map[string]any); !ok {
		return "", "", false
	}
	chartNamespace, _ = nested(obj, "spec", "chart", "spec", "sourceRef", "namespace").(string)
	if chartNamespace == "" {
		chartNamespace = namespace
	}
	return chartNamespace, namespace + "-" + name, true
}

// chartOwners are the other releases whose HelmChart would have the same name: every
// split of <namespace>-<name> at a dash into another namespace and name. Pure.
func chartOwners(namespace, name string) []client.ObjectKey {
	joined := namespace + "-" + name
	var out []client.ObjectKey
	for i := range len(joined) {
		if joined[i] != '-' || i == len(namespace) {
			continue
		}
		ns, n := joined[:i], joined[i+1:]
		if ns != "" && n != "" {
			out = append(out, client.ObjectKey{Namespace: ns, Name: n})
		}
	}
	return out
}

// chartCollision names the release of another namespace whose HelmChart Flux would
// create under the same name in the same namespace as this release's ("": none). Flux
// names a chart template's HelmChart <namespace>-<name>, so releases a/b-x and a-b/x
// with charts from one shared namespace (a platform's catalogue) share one HelmChart:
// either tenant reads, pins or deletes the other's chart. Only namespaces that exist
// (from the manager's cache) are read for a release.
func (w *Webhook) chartCollision(ctx context.Context, obj map[string]any, namespace, name string) (string, error) {
	chartNS, chartName, ok := chartTemplate(obj, namespace, name)
	if !ok {
		return "", nil
	}
	cache := w.Cache
	if cache == nil {
		cache = w.Reader
	}
	for _, key := range chartOwners(namespace, name) {
		switch err := cache.Get(ctx, client.ObjectKey{Name: key.Namespace}, &corev1.Namespace{}); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return "", fmt.Errorf("reading namespace %q: %w", key.Namespace, err)
		}
		other := &helmv2.HelmRelease{}
		switch err := w.Reader.Get(ctx, key, other); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return "", fmt.Errorf("reading HelmRelease %s: %w", key, err)
		}
		if other.Spec.Chart == nil {
			continue
		}
		if otherNS := other.Spec.Chart.GetNamespace(other.Namespace); otherNS == chartNS {
			return fmt.Sprintf("spec.chart: Flux would create this release's HelmChart as %s/%s, the HelmChart of HelmRelease %s (Flux names it <namespace>-<name>): one release would read, pin or delete the other's chart; rename this release",
				chartNS, chartName, key), nil
		}
	}
	return "", nil
}
