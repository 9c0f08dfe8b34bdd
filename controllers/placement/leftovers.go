package placement

import (
	"context"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

// Reasons of the events on a deleted release's leftovers.
const (
	// LeftoversRemovedReason: what the release's chart kept or its hooks left in the
	// plane was deleted after Flux's uninstall.
	LeftoversRemovedReason = "LeftoversRemoved"
	// LeftoversPendingReason: the release is kept until what its chart kept or its
	// hooks left can be removed from the plane.
	LeftoversPendingReason = "LeftoversPending"
)

// Leftovers removes from a plane what an uninstalled placement release left there: in
// the plane's target namespaces, as the release's deployer, the objects carrying the
// release's Flux origin labels (remote.Leftovers). It returns how many it deleted.
type Leftovers interface {
	Sweep(ctx context.Context, plane, release types.NamespacedName, targets []string) (int, error)
}

// sweep removes what a release Flux has uninstalled left in its live plane, and reports
// whether the release may go. A release Flux never acted on has left nothing. A sweep
// that cannot be made (no answering connection to the plane, a failed request) keeps
// the release, its event saying why, and is tried again: the same orphan that
// deletionPropagation: orphan is refused for would otherwise outlive it.
func (r *Reconciler) sweep(ctx context.Context, hr *helmv2.HelmRelease, plane *cpv1.ComputePlane) bool {
	if neverActedOn(hr) {
		return true
	}
	if r.Leftovers == nil {
		r.tell(hr, corev1.EventTypeWarning, LeftoversPendingReason,
			"uninstalled, and kept: this operator build cannot remove from the plane what the chart kept or its hooks left")
		return false
	}
	n, err := r.Leftovers.Sweep(ctx, client.ObjectKeyFromObject(plane), client.ObjectKeyFromObject(hr), tenancy.PlacementNamespaces(plane))
	if err != nil {
		r.tell(hr, corev1.EventTypeWarning, LeftoversPendingReason,
			"uninstalled, and kept until what its chart kept (helm.sh/resource-policy: keep) or its hooks left is removed from ComputePlane %s: %v; tried again shortly", plane.Name, err)
		return false
	}
	if n > 0 {
		r.tell(hr, corev1.EventTypeNormal, LeftoversRemovedReason,
			"deleted %d object(s) from ComputePlane %s that Helm's uninstall left (kept by the chart, or created by its hooks)", n, plane.Name)
	}
	return true
}

// neverActedOn reports whether Flux never installed, upgraded or uninstalled the release
// (its status records no action and no release): nothing of it can be in the plane.
func neverActedOn(hr *helmv2.HelmRelease) bool {
	return hr.Status.LastAttemptedReleaseAction == "" && len(hr.Status.History) == 0 && hr.Status.LastAttemptedRevision == ""
}
