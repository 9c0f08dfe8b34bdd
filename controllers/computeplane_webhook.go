package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-computeplane-cozystack-io-v1alpha1-computeplane,mutating=false,failurePolicy=fail,sideEffects=None,groups=computeplane.cozystack.io,resources=computeplanes,verbs=create,versions=v1alpha1,name=vcomputeplane.computeplane.cozystack.io,admissionReviewVersions=v1,timeoutSeconds=5

// ComputePlaneValidator refuses what the CRD schema cannot see: a second ComputePlane in
// a namespace, and a class that does not allow the namespace. It reads the API directly, not the cache, so a plane created a moment ago
// counts; creates racing past it are settled by the reconciler (the older plane wins).
type ComputePlaneValidator struct {
	Reader client.Reader
}

// SetupWebhookWithManager registers the validator with the manager's webhook server.
func (v *ComputePlaneValidator) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &cpv1.ComputePlane{}).WithValidator(v).Complete()
}

// ValidateCreate refuses a second plane in a namespace and warns about a missing class.
func (v *ComputePlaneValidator) ValidateCreate(ctx context.Context, p *cpv1.ComputePlane) (admission.Warnings, error) {
	var planes cpv1.ComputePlaneList
	if err := v.Reader.List(ctx, &planes, client.InNamespace(p.Namespace)); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("listing ComputePlanes in %q: %w", p.Namespace, err))
	}
	for _, other := range planes.Items {
		if other.Name != p.Name {
			return nil, apierrors.NewForbidden(cpv1.GroupVersion.WithResource("computeplanes").GroupResource(), p.Name,
				fmt.Errorf("namespace %q already has ComputePlane %q: at most one ComputePlane per namespace is allowed",
					p.Namespace, other.Name))
		}
	}
	class := &cpv1.ComputePlaneClass{}
	switch err := v.Reader.Get(ctx, client.ObjectKey{Name: p.Spec.ClassName}, class); {
	case apierrors.IsNotFound(err):
		// The controller checks the namespace once the class exists.
		return admission.Warnings{fmt.Sprintf("ComputePlaneClass %q does not exist yet; the plane waits for it", p.Spec.ClassName)}, nil
	case err != nil:
		return nil, apierrors.NewInternalError(fmt.Errorf("reading ComputePlaneClass %q: %w", p.Spec.ClassName, err))
	}
	ns := &corev1.Namespace{}
	if err := v.Reader.Get(ctx, client.ObjectKey{Name: p.Namespace}, ns); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("reading namespace %q: %w", p.Namespace, err))
	}
	if !namespaceAllowed(class.Spec.AllowedNamespaces, ns.Labels) {
		return nil, apierrors.NewForbidden(cpv1.GroupVersion.WithResource("computeplanes").GroupResource(), p.Name,
			fmt.Errorf("ComputePlaneClass %q does not allow namespace %q (its spec.allowedNamespaces %s); use a class this namespace may use",
				class.Name, p.Namespace, selectorString(class.Spec.AllowedNamespaces)))
	}
	return nil, nil
}

// ValidateUpdate has nothing to add to the schema's rules.
func (v *ComputePlaneValidator) ValidateUpdate(context.Context, *cpv1.ComputePlane, *cpv1.ComputePlane) (admission.Warnings, error) {
	return nil, nil
}

// ValidateDelete allows every delete: teardown is the finalizer's job.
func (v *ComputePlaneValidator) ValidateDelete(context.Context, *cpv1.ComputePlane) (admission.Warnings, error) {
	return nil, nil
}
