package tenancy

import (
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// OldestPlane returns the plane created first (by name on a tie), ignoring planes being
// deleted, or nil: of two planes created in one namespace past admission, it is the one
// that serves it.
func OldestPlane(planes []cpv1.ComputePlane) *cpv1.ComputePlane {
	live := make([]*cpv1.ComputePlane, 0, len(planes))
	for i := range planes {
		if planes[i].DeletionTimestamp.IsZero() {
			live = append(live, &planes[i])
		}
	}
	if len(live) == 0 {
		return nil
	}
	sort.Slice(live, func(i, j int) bool {
		ti, tj := live[i].CreationTimestamp, live[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return live[i].Name < live[j].Name
	})
	return live[0]
}

// PlaneOfNamespace picks a namespace's ComputePlane from the planes in it: the oldest
// live one, or, when all are being deleted, one of those (its teardown still sees to the
// namespace's releases); nil when there is none.
func PlaneOfNamespace(planes []cpv1.ComputePlane) *cpv1.ComputePlane {
	if p := OldestPlane(planes); p != nil {
		return p
	}
	if len(planes) > 0 {
		return &planes[0]
	}
	return nil
}

// NamespaceAllowed reports whether a class's allowedNamespaces selects a namespace with
// these labels. Unset selects nothing; an empty selector selects everything.
func NamespaceAllowed(sel *metav1.LabelSelector, nsLabels map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(nsLabels))
}

// SelectorString says what an allowedNamespaces selector allows, for messages.
func SelectorString(sel *metav1.LabelSelector) string {
	if sel == nil {
		return "is unset, which allows no namespace"
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return "is malformed: " + err.Error()
	}
	if s.Empty() {
		return "allows every namespace"
	}
	return "selects " + s.String()
}

// PlacementNamespaces are the namespaces pre-created in the plane for placement: the one
// named like the ComputePlane's namespace (Flux impersonates the deployer there) and the
// extra ones the spec lists.
func PlacementNamespaces(p *cpv1.ComputePlane) []string {
	out := []string{p.Namespace}
	for _, n := range p.Spec.PlacementNamespaces {
		if n != p.Namespace {
			out = append(out, n)
		}
	}
	return out
}

// IsPlacement reports whether a HelmRelease with these labels is a placement release.
func IsPlacement(releaseLabels map[string]string) bool {
	return releaseLabels[cpv1.PlacementLabel] == cpv1.PlacementLabelValue
}
