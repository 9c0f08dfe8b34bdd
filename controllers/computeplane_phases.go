package controllers

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// reconcileValid checks what admission cannot: the class exists, the knobs fit it, and
// this is the namespace's only ComputePlane (the webhook refuses a second one, but two
// creates racing past it are settled here: the older plane wins).
func (r *ComputePlaneReconciler) reconcileValid(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.plane

	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.InNamespace(p.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	if first := oldestPlane(planes.Items); first != nil && first.Name != p.Name {
		s.observe(cpv1.ValidCondition, stageInvalid(cpv1.DuplicateReason,
			"ComputePlane %q already serves namespace %q; at most one ComputePlane per namespace is allowed, delete this one",
			first.Name, p.Namespace))
		return ctrl.Result{}, nil
	}

	class := &cpv1.ComputePlaneClass{}
	if err := r.Get(ctx, client.ObjectKey{Name: p.Spec.ClassName}, class); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		// Not terminal: the class watch resumes the plane as soon as the class exists.
		s.observe(cpv1.ValidCondition, stageFalse(cpv1.ClassNotFoundReason,
			"ComputePlaneClass %q does not exist; ask a platform operator to create it or set spec.className to an existing class",
			p.Spec.ClassName))
		return ctrl.Result{}, nil
	}
	s.class = class

	if errs := checkAgainstClass(&p.Spec, &class.Spec); len(errs) > 0 {
		s.observe(cpv1.ValidCondition, stageInvalid(cpv1.SpecExceedsClassReason,
			"%s (class %q); change the spec or ask for a class that allows it", errs.ToAggregate().Error(), class.Name))
		return ctrl.Result{}, nil
	}
	s.observe(cpv1.ValidCondition, stageTrue(cpv1.SucceededReason,
		fmt.Sprintf("The spec fits class %q", class.Name)))
	return ctrl.Result{}, nil
}

// oldestPlane returns the plane created first (by name on a tie), ignoring planes being
// deleted, or nil.
func oldestPlane(planes []cpv1.ComputePlane) *cpv1.ComputePlane {
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

func (r *ComputePlaneReconciler) planesOfClass(ctx context.Context, o client.Object) []ctrl.Request {
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.MatchingFields{classNameField: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of a class", "class", o.GetName())
		return nil
	}
	return requestsFor(planes.Items, "")
}

func (r *ComputePlaneReconciler) otherPlanesInNamespace(ctx context.Context, o client.Object) []ctrl.Request {
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
func (r *ComputePlaneReconciler) planesOfInfraNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	var planes cpv1.ComputePlaneList
	if err := r.List(ctx, &planes, client.MatchingFields{infraNSField: o.GetNamespace()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the planes of an infrastructure namespace", "namespace", o.GetNamespace())
		return nil
	}
	return requestsFor(planes.Items, "")
}
