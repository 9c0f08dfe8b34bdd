package computeplane

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

// +kubebuilder:rbac:groups=kustomize.toolkit.fluxcd.io,resources=kustomizations,verbs=list

// +kubebuilder:webhook:path=/validate-computeplane-cozystack-io-v1alpha1-computeplane,mutating=false,failurePolicy=fail,sideEffects=None,groups=computeplane.cozystack.io,resources=computeplanes,verbs=create;delete,versions=v1alpha1,name=vcomputeplane.computeplane.cozystack.io,admissionReviewVersions=v1,timeoutSeconds=5

// Validator refuses what the CRD schema cannot see: a second ComputePlane in
// a namespace, a class that does not allow the namespace, and a Flux object already
// naming the applier kubeconfig the plane would get. It reads the API directly, not the cache, so a plane created a moment ago
// counts; creates racing past it are settled by the reconciler (the older plane wins).
type Validator struct {
	Reader client.Reader
}

// SetupWebhookWithManager registers the validator with the manager's webhook server.
func (v *Validator) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &cpv1.ComputePlane{}).WithValidator(v).Complete()
}

// ValidateCreate refuses a second plane in a namespace and warns about a missing class.
func (v *Validator) ValidateCreate(ctx context.Context, p *cpv1.ComputePlane) (admission.Warnings, error) {
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
	if err := v.noFluxObjectNamesTheCredential(ctx, p); err != nil {
		return nil, err
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
	if !tenancy.NamespaceAllowed(class.Spec.AllowedNamespaces, ns.Labels) {
		return nil, apierrors.NewForbidden(cpv1.GroupVersion.WithResource("computeplanes").GroupResource(), p.Name,
			fmt.Errorf("ComputePlaneClass %q does not allow namespace %q (its spec.allowedNamespaces %s); use a class this namespace may use",
				class.Name, p.Namespace, tenancy.SelectorString(class.Spec.AllowedNamespaces)))
	}
	return nil, nil
}

// ValidateUpdate has nothing to add to the schema's rules.
func (v *Validator) ValidateUpdate(context.Context, *cpv1.ComputePlane, *cpv1.ComputePlane) (admission.Warnings, error) {
	return nil, nil
}

// ValidateDelete refuses to delete a plane that placement releases still run in, naming
// them, unless its owner asked for them to be uninstalled with it (the
// uninstall-releases annotation) or a platform operator abandoned it; the teardown holds
// a plane whose delete got past this (Reconciling=Protected). A namespace being deleted
// takes its plane with it: that is never refused (it would keep the namespace forever).
func (v *Validator) ValidateDelete(ctx context.Context, p *cpv1.ComputePlane) (admission.Warnings, error) {
	if p.Annotations[cpv1.UninstallAnnotation] != "" || p.Annotations[cpv1.AbandonAnnotation] != "" || !p.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	running, err := runningReleases(ctx, v.Reader, p.Namespace)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("listing the placement releases of %q: %w", p.Namespace, err))
	}
	if len(running) == 0 {
		return nil, nil
	}
	ns := &corev1.Namespace{}
	if err := v.Reader.Get(ctx, client.ObjectKey{Name: p.Namespace}, ns); client.IgnoreNotFound(err) != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("reading namespace %q: %w", p.Namespace, err))
	}
	if !ns.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	return nil, apierrors.NewForbidden(cpv1.GroupVersion.WithResource("computeplanes").GroupResource(), p.Name,
		fmt.Errorf("%s: delete them first, or have the plane's owner annotate it %s=<why> to uninstall them with the plane",
			protectedBy(running), cpv1.UninstallAnnotation))
}

// fluxLists are the Flux kinds whose objects can name a Secret of their namespace as a
// kubeconfig or a source of values (the kinds the placement webhook judges).
var fluxLists = []schema.GroupVersionKind{
	{Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmReleaseList"},
	{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "KustomizationList"},
}

// errStopListing ends a walk of Flux objects early.
var errStopListing = errors.New("stop listing")

// noFluxObjectNamesTheCredential refuses a plane whose applier kubeconfig a Flux object
// of the namespace already names: the placement webhook refuses such an object once the
// plane exists, so without this check a tenant could name the credential first and have
// it used, unheld, as soon as the plane issued it. A kind that is not installed has no
// objects.
func (v *Validator) noFluxObjectNamesTheCredential(ctx context.Context, p *cpv1.ComputePlane) error {
	for _, gvk := range fluxLists {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		kind := strings.TrimSuffix(gvk.Kind, "List")
		var refused error
		err := eachFluxObject(ctx, v.Reader, list, p.Namespace, func(o *unstructured.Unstructured) error {
			placement := kind == "HelmRelease" && tenancy.IsPlacement(o.GetLabels())
			if errs := tenancy.CredentialErrors(kind, placement, tenancy.SuspectNames(o.Object), []cpv1.ComputePlane{*p}); len(errs) > 0 {
				refused = apierrors.NewForbidden(cpv1.GroupVersion.WithResource("computeplanes").GroupResource(), p.Name,
					fmt.Errorf("%s %s/%s already names %s, the applier kubeconfig this ComputePlane would get (%s); remove that reference first",
						kind, o.GetNamespace(), o.GetName(), tenancy.ApplierSecretName(p), errs[0].Field))
				return errStopListing
			}
			return nil
		})
		switch {
		case refused != nil:
			return refused
		case apimeta.IsNoMatchError(err):
		case err != nil:
			return apierrors.NewInternalError(fmt.Errorf("listing %s in %q: %w", gvk.Kind, p.Namespace, err))
		}
	}
	return nil
}
