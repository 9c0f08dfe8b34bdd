package computeplane

import (
	"context"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fluxPage bounds a page of Flux objects read from the API server. A tenant's release
// may carry ~1.5 MiB of values and a page is decoded whole, so the reads the operator
// makes of every release of a namespace (its teardown, a plane's creation)
// cost memory in proportion to a page, not to all a tenant stored.
const fluxPage = 20

// listReleases lists a namespace's HelmReleases that match labels from the API server,
// page by page, keeping of each everything but its values and managed fields, which
// nothing here reads.
func listReleases(ctx context.Context, reader client.Reader, namespace string, labels client.MatchingLabels) ([]helmv2.HelmRelease, error) {
	var out []helmv2.HelmRelease
	for cont := ""; ; {
		var page helmv2.HelmReleaseList
		if err := reader.List(ctx, &page, client.InNamespace(namespace), labels, client.Limit(fluxPage), client.Continue(cont)); err != nil {
			return nil, err
		}
		for i := range page.Items {
			page.Items[i].Spec.Values, page.Items[i].ManagedFields = nil, nil
			out = append(out, page.Items[i])
		}
		if cont = page.Continue; cont == "" {
			return out, nil
		}
	}
}

// eachFluxObject calls f on every object of the list's kind in namespace, read from the
// API server page by page, without spec.values and managed fields.
func eachFluxObject(ctx context.Context, reader client.Reader, list *unstructured.UnstructuredList, namespace string, f func(*unstructured.Unstructured) error) error {
	for cont := ""; ; {
		page := &unstructured.UnstructuredList{}
		page.SetGroupVersionKind(list.GroupVersionKind())
		if err := reader.List(ctx, page, client.InNamespace(namespace), client.Limit(fluxPage), client.Continue(cont)); err != nil {
			return err
		}
		for i := range page.Items {
			o := &page.Items[i]
			unstructured.RemoveNestedField(o.Object, "spec", "values")
			o.SetManagedFields(nil)
			if err := f(o); err != nil {
				return err
			}
		}
		if cont = page.GetContinue(); cont == "" {
			return nil
		}
	}
}
