package placement

import (
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// CacheObjects are what the placement controller needs of the manager's informers:
// the placement releases only, without what it never reads.
func CacheObjects() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&helmv2.HelmRelease{}: {Label: labels.SelectorFromSet(labels.Set{cpv1.PlacementLabel: cpv1.PlacementLabelValue}),
			Transform: placementRelease},
	}
}

// placementRelease keeps of a placement release what the placement controller reads:
// identity, labels, finalizers, its own annotation, the spec but its values (routing,
// sources, valuesFrom and suspend are judged), status.storageNamespace, and whether
// Flux ever acted on it (its last action and revision, its latest release).
func placementRelease(obj any) (any, error) {
	hr, ok := obj.(*helmv2.HelmRelease)
	if !ok {
		return obj, nil
	}
	out := &helmv2.HelmRelease{TypeMeta: hr.TypeMeta, Spec: hr.Spec}
	out.ObjectMeta = metav1.ObjectMeta{Namespace: hr.Namespace, Name: hr.Name, UID: hr.UID, ResourceVersion: hr.ResourceVersion,
		Generation: hr.Generation, Labels: hr.Labels, DeletionTimestamp: hr.DeletionTimestamp}
	out.Finalizers, out.CreationTimestamp = hr.Finalizers, hr.CreationTimestamp
	if v, ok := hr.Annotations[cpv1.SuspendedAnnotation]; ok {
		out.Annotations = map[string]string{cpv1.SuspendedAnnotation: v}
	}
	out.Spec.Values = nil
	out.Status.StorageNamespace = hr.Status.StorageNamespace
	out.Status.LastAttemptedReleaseAction, out.Status.LastAttemptedRevision = hr.Status.LastAttemptedReleaseAction, hr.Status.LastAttemptedRevision
	if len(hr.Status.History) > 0 {
		out.Status.History = hr.Status.History[:1]
	}
	return out, nil
}
