package placement

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

// placementClass says which class's placementReleases.selector makes an unlabelled
// release a placement release ("" for none), and the namespace's plane when it looked it
// up. The classes come from the manager's cache, so a release no selector matches (every
// release where no class has one) costs no read. A match counts when the namespace's
// plane is of that class, or, with no plane, when the class allows the namespace (the
// release is then refused rather than applied to the management cluster).
func (w *Webhook) placementClass(ctx context.Context, namespace string, obj map[string]any) (*cpv1.ComputePlane, string, error) {
	reader := w.Cache
	if reader == nil {
		reader = w.Reader
	}
	releaseLabels := stringLabels(obj)
	var classes cpv1.ComputePlaneClassList
	if err := reader.List(ctx, &classes); err != nil {
		return nil, "", fmt.Errorf("listing the ComputePlaneClasses: %w", err)
	}
	matching := matchingClasses(classes.Items, releaseLabels)
	if len(matching) == 0 {
		return nil, "", nil
	}
	if uid, marked := releaseLabels[cpv1.PlaneUIDLabel]; marked {
		// The operator's own add-on releases are never placement releases, whatever a
		// selector matches: those in the infrastructure namespace of the plane whose uid
		// they carry. Anywhere else the label is the tenant's, and exempts nothing (a
		// release of a placed kind would be stored unrouted, for the management cluster).
		var planes cpv1.ComputePlaneList
		if err := reader.List(ctx, &planes, client.MatchingFields{tenancy.InfrastructureNamespaceField: namespace}); err != nil {
			return nil, "", fmt.Errorf("listing the planes of infrastructure namespace %q: %w", namespace, err)
		}
		if slices.ContainsFunc(planes.Items, func(p cpv1.ComputePlane) bool { return string(p.UID) == uid }) {
			return nil, "", nil
		}
	}
	plane, err := w.planeOf(ctx, namespace)
	if err != nil {
		return nil, "", err
	}
	if plane != nil {
		for _, c := range matching {
			if c.Name == plane.Spec.ClassName {
				return plane, c.Name, nil
			}
		}
		return plane, "", nil
	}
	ns := &corev1.Namespace{}
	if err := w.Reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return nil, "", fmt.Errorf("reading namespace %q: %w", namespace, err)
	}
	for _, c := range matching {
		if tenancy.NamespaceAllowed(c.Spec.AllowedNamespaces, ns.Labels) {
			return nil, c.Name, nil
		}
	}
	return nil, "", nil
}

// matchingClasses are the classes whose placementReleases.selector matches a release's
// labels, by name. Pure.
func matchingClasses(classes []cpv1.ComputePlaneClass, releaseLabels map[string]string) []cpv1.ComputePlaneClass {
	var out []cpv1.ComputePlaneClass
	for _, c := range classes {
		sel := c.Spec.PlacementReleases.Selector
		if sel == nil {
			continue
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() {
			// An empty selector would make every release of the namespace a placement
			// release: the schema refuses it; a malformed one matches nothing.
			continue
		}
		if s.Matches(labels.Set(releaseLabels)) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b cpv1.ComputePlaneClass) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// stringLabels are an object's labels as strings.
func stringLabels(obj map[string]any) map[string]string {
	in, _ := nested(obj, "metadata", "labels").(map[string]any)
	out := make(map[string]string, len(in))
	for k, v := range in {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// planeOf returns the ComputePlane of a namespace (the oldest live one; a plane being
// deleted when that is all there is), or nil.
func (w *Webhook) planeOf(ctx context.Context, namespace string) (*cpv1.ComputePlane, error) {
	var planes cpv1.ComputePlaneList
	if err := w.Reader.List(ctx, &planes, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the ComputePlanes of %q: %w", namespace, err)
	}
	return tenancy.PlaneOfNamespace(planes.Items), nil
}
