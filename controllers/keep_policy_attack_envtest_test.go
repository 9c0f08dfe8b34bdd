package controllers_test

import (
	"context"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAttackKeepEverythingPastUninstall: deletionPropagation orphan is refused because
// the uninstall the placement finalizer waits for would leave the workload running in the
// plane. Helm's own helm.sh/resource-policy: keep does the same for every object it
// annotates, and spec.commonMetadata puts it on every object of the release: refused at
// admission.
func TestAttackKeepEverythingPastUninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("keep-"+rand.String(6)))
	mallory := fluxTenant(t, ctx, p.Namespace, "mallory-"+rand.String(4))
	kept := placementRelease(p.Namespace, "kept", func(hr *helmv2.HelmRelease) {
		hr.Spec.CommonMetadata = &helmv2.CommonMetadata{Annotations: map[string]string{"helm.sh/resource-policy": "keep"}}
	})
	denied(t, mallory.Create(ctx, kept, client.DryRunAll), "spec.commonMetadata.annotations[helm.sh/resource-policy]: Forbidden")
	labelled := placementRelease(p.Namespace, "labelled", func(hr *helmv2.HelmRelease) {
		hr.Spec.CommonMetadata = &helmv2.CommonMetadata{Labels: map[string]string{"team": "data"}}
	})
	if err := mallory.Create(ctx, labelled, client.DryRunAll); err != nil {
		t.Errorf("common labels were refused: %v", err)
	}
}
