package computeplane

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

func (r *Reconciler) planesOfClass(ctx context.Context, o client.Object) []ctrl.Request {
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.MatchingFields{tenancy.ClassNameField: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of a class", "class", o.GetName())
		return nil
	}
	return requestsFor(planes.Items, "")
}

func (r *Reconciler) otherPlanesInNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of a namespace", "namespace", o.GetNamespace())
		return nil
	}
	return requestsFor(planes.Items, o.GetName())
}

func requestsFor(planes []cpv1.ComputePlane, except string) []ctrl.Request {
	reqs := make([]ctrl.Request, 0, len(planes))
	for _, p := range planes {
		if p.Name != except {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
		}
	}
	return reqs
}

// planeFromLabels maps an object the operator created to its plane.
func planeFromLabels(_ context.Context, o client.Object) []ctrl.Request {
	l := o.GetLabels()
	name, ns := l[cpv1.PlaneNameLabel], l[cpv1.PlaneNamespaceLabel]
	if name == "" || ns == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}}
}

// planesOfInfraNamespace maps a provider-created object to the plane whose
// infrastructure namespace holds it.
func (r *Reconciler) planesOfInfraNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.MatchingFields{tenancy.InfrastructureNamespaceField: o.GetNamespace()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of an infrastructure namespace", "namespace", o.GetNamespace())
		return nil
	}
	return requestsFor(planes.Items, "")
}

// planesOfAddon maps an add-on release (the add-on cache's watch) to the plane whose
// infrastructure namespace holds it, never to the plane its labels name.
func (r *Reconciler) planesOfAddon(ctx context.Context, hr *helmv2.HelmRelease) []ctrl.Request {
	return r.planesOfInfraNamespace(ctx, hr)
}

// planesOfNamespace maps a namespace to the planes in it and the planes whose
// infrastructure namespace it is.
func (r *Reconciler) planesOfNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	var in, infra cpv1.ComputePlaneList
	if err := r.List(ctx, &in, client.InNamespace(o.GetName())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of a namespace", "namespace", o.GetName())
		return nil
	}
	if err := r.List(ctx, &infra, client.MatchingFields{tenancy.InfrastructureNamespaceField: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of an infrastructure namespace", "namespace", o.GetName())
		return nil
	}
	return append(requestsFor(in.Items, ""), requestsFor(infra.Items, "")...)
}

// planesInNamespace maps an object to the planes of its namespace.
func (r *Reconciler) planesInNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of a namespace", "namespace", o.GetNamespace())
		return nil
	}
	return requestsFor(planes.Items, "")
}

// kamajiControlPlaneKind is an empty KamajiControlPlane (its Go types cannot be a
// dependency), for watching.
func kamajiControlPlaneKind() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(render.KamajiAPIVersion)
	u.SetKind(render.KamajiControlPlaneKind)
	return u
}
