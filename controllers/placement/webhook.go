package placement

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

// Paths of the placement webhooks (config/webhook/placement.yaml registers them: the
// mutating one for placement releases only, the validating one for every HelmRelease and
// Kustomization outside the platform's own namespaces).
const (
	PlacementMutatePath   = "/mutate-placement-helmrelease"
	PlacementValidatePath = "/validate-placement-helmrelease"
)

// DefaultMaxPlacementReleases is the schema's default of a class's
// spec.placementReleases.maxReleases, for a class stored before the field.
const DefaultMaxPlacementReleases = 200

// Webhook routes placement releases at admission, so no stored version of one
// ever lacks its routing: the mutating half fills in what a release leaves out and adds
// the placement finalizer; the validating half (after every mutation) refuses anything
// else, a release in a namespace with no ComputePlane, one created for a plane being
// deleted, a chart source outside the namespaces its class allows, and the label's
// removal. The validating half also judges every other HelmRelease and Kustomization:
// none may name a plane's applier kubeconfig. Both work on the JSON object, not Flux's Go
// types, so fields newer than this build's Flux API (a kubeConfig.configMapRef, say) are
// seen.
type Webhook struct {
	// Reader reads ComputePlanes from the API, not a cache: a plane created a moment
	// ago counts.
	Reader client.Reader
	// Cache counts a plane's placement releases (the manager's cache, which holds them):
	// a bound, where a few creates in flight past it do no harm.
	Cache client.Reader
}

// SetupWithManager registers both halves with the manager's webhook server.
func (w *Webhook) SetupWithManager(mgr ctrl.Manager) {
	mgr.GetWebhookServer().Register(PlacementMutatePath, &webhook.Admission{Handler: admission.HandlerFunc(w.mutate)})
	mgr.GetWebhookServer().Register(PlacementValidatePath, &webhook.Admission{Handler: admission.HandlerFunc(w.validate)})
}

func (w *Webhook) mutate(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	obj, err := decodeJudged(req.Object.Raw)
	if err != nil {
		// The validating half refuses it, saying why.
		return admission.Allowed("")
	}
	if nested(obj, "metadata", "deletionTimestamp") != nil {
		return admission.Allowed("")
	}
	var plane *cpv1.ComputePlane
	var ops []jsonpatch.Operation
	if !isPlacement(obj) {
		var kind string
		if plane, kind, err = w.placementClass(ctx, req.Namespace, obj); err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		if kind == "" {
			return admission.Allowed("") // not a placement release: never changed
		}
		ops = labelOp(obj, cpv1.PlacementLabel, cpv1.PlacementLabelValue)
	} else if plane, err = w.planeOf(ctx, req.Namespace); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if plane != nil {
		// Without a plane the validating half refuses it, saying why.
		ops = append(ops, routingOps(obj, routeFor(plane))...)
		ops = append(ops, finalizerOp(obj, cpv1.PlacementFinalizer)...)
	}
	return admission.Patched("", ops...)
}

func (w *Webhook) validate(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	obj, err := decodeJudged(req.Object.Raw)
	var old map[string]any
	if err == nil && req.Operation == admissionv1.Update {
		if old, err = decodeJudged(req.OldObject.Raw); err != nil {
			err = fmt.Errorf("the stored version, from before the bound: %w; delete the object and create it again within the bound", err)
		}
	}
	var big errTooLarge
	switch {
	case errors.As(err, &big) && isDeleted(req.Object.Raw):
		// A deleted object only loses finalizers: it can no longer be applied anywhere.
		return admission.Allowed("")
	case errors.As(err, &big):
		return admission.Denied(fmt.Sprintf("%s %s/%s: %v", req.Kind.Kind, req.Namespace, req.Name, err))
	case err != nil:
		return admission.Errored(http.StatusBadRequest, err)
	}
	return w.validateObject(ctx, req, obj, old)
}

// validateObject judges a Flux object, decoded as admission judges it, and on an update
// the version it replaces.
func (w *Webhook) validateObject(ctx context.Context, req admission.Request, obj, old map[string]any) admission.Response {
	if req.Kind.Kind == "HelmRelease" && nested(obj, "metadata", "deletionTimestamp") == nil &&
		(old == nil || !reflect.DeepEqual(old["spec"], obj["spec"])) {
		// Judged when the spec is set: Flux's own metadata updates of a pair stored
		// before the rule must go through.
		why, err := w.chartCollision(ctx, obj, req.Namespace, req.Name)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		if why != "" {
			return admission.Denied(fmt.Sprintf("HelmRelease %s/%s: %s", req.Namespace, req.Name, why))
		}
	}
	if req.Kind.Kind != "HelmRelease" || !isPlacement(obj) {
		return w.validateOther(ctx, req, obj, old)
	}
	wasPlacement := old != nil && isPlacement(old)
	if wasPlacement {
		if reflect.DeepEqual(old["spec"], obj["spec"]) {
			// Metadata only (Flux's finalizers): judged when the spec was set, and must not
			// depend on the plane (a release whose plane has gone).
			return admission.Allowed("")
		}
		if nested(obj, "metadata", "deletionTimestamp") != nil {
			if onlySuspendChanged(old, obj) {
				// The operator unsuspends a deleted release so that Flux uninstalls it.
				return admission.Allowed("")
			}
			return admission.Denied("a placement release being deleted keeps its spec until it is uninstalled from the plane")
		}
	}
	plane, err := w.planeOf(ctx, req.Namespace)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if plane == nil {
		return admission.Denied(fmt.Sprintf("namespace %q has no ComputePlane: a placement release runs only on the ComputePlane of its own namespace (never another tenant's, never the management cluster); create one first, or remove the %s label to deploy elsewhere",
			req.Namespace, cpv1.PlacementLabel))
	}
	if req.Operation == admissionv1.Create && !plane.DeletionTimestamp.IsZero() {
		return admission.Denied(fmt.Sprintf("ComputePlane %s/%s is being deleted; it takes no new placement releases", plane.Namespace, plane.Name))
	}
	policy, err := w.releasePolicy(ctx, plane)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if req.Operation == admissionv1.Create {
		if resp := w.withinCap(ctx, plane, policy.MaxReleases); resp != nil {
			return *resp
		}
	}
	errs := placementErrors(obj, plane, policy)
	if wasPlacement && !unsuspends(old, obj) {
		// Refused for what the update introduces; resuming a release that does not fit is
		// judged whole (the placement controller suspended it for a reason).
		errs = newErrors(errs, placementErrors(old, plane, policy))
	}
	if len(errs) > 0 {
		return admission.Denied(fmt.Sprintf("placement release %s/%s must be routed into ComputePlane %s only: %s",
			req.Namespace, req.Name, plane.Name, errs.ToAggregate().Error()))
	}
	return admission.Allowed("")
}

// validateOther judges a Flux object that is not (or no longer) a placement release:
// the placement label cannot be removed, a release a class's selector makes a placement
// release cannot arrive unlabelled, and nothing may name a plane's credential.
func (w *Webhook) validateOther(ctx context.Context, req admission.Request, obj, old map[string]any) admission.Response {
	if old != nil && req.Kind.Kind == "HelmRelease" && isPlacement(old) {
		return admission.Denied(fmt.Sprintf("the %s=%s label cannot be removed from a placement release (it would be applied elsewhere); delete the release instead",
			cpv1.PlacementLabel, cpv1.PlacementLabelValue))
	}
	if req.Kind.Kind == "HelmRelease" && nested(obj, "metadata", "deletionTimestamp") == nil {
		// The mutating half labels what a class's selector matches; one that arrives
		// unlabelled all the same (that webhook bypassed) is refused, never applied to
		// the management cluster.
		_, kind, err := w.placementClass(ctx, req.Namespace, obj)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		if kind != "" {
			return admission.Denied(fmt.Sprintf("HelmRelease %s/%s matches ComputePlaneClass %s's spec.placementReleases.selector, so it is a placement release, but it arrived without the %s label the operator's mutating webhook adds; is that webhook registered?",
				req.Namespace, req.Name, kind, cpv1.PlacementLabel))
		}
	}
	return w.validateReferences(ctx, req, obj)
}

// validateReferences judges a Flux object that is not a placement release (any other
// HelmRelease, a Kustomization): it may not name a plane's applier kubeconfig anywhere.
// Objects that name nothing like one, almost all of them, are allowed without a read.
func (w *Webhook) validateReferences(ctx context.Context, req admission.Request, obj map[string]any) admission.Response {
	suspects := tenancy.SuspectNames(obj)
	if len(suspects) == 0 || nested(obj, "metadata", "deletionTimestamp") != nil {
		// A deleted object only loses finalizers; it can no longer be applied anywhere.
		return admission.Allowed("")
	}
	names := suspectPlanes(suspects)
	if len(names) > MaxSuspectPlanes {
		return admission.Denied(fmt.Sprintf("%s %s/%s names %d Secrets shaped like a ComputePlane's applier kubeconfig (*%s), more than the %d the operator's admission looks up",
			req.Kind.Kind, req.Namespace, req.Name, len(names), cpv1.ApplierKubeconfigSuffix, MaxSuspectPlanes))
	}
	var planes []cpv1.ComputePlane
	for _, name := range names {
		p, err := w.suspectPlane(ctx, client.ObjectKey{Namespace: req.Namespace, Name: name})
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		if p != nil {
			planes = append(planes, *p)
		}
	}
	if errs := tenancy.CredentialErrors(req.Kind.Kind, false, suspects, planes); len(errs) > 0 {
		return admission.Denied(fmt.Sprintf("%s %s/%s: %s", req.Kind.Kind, req.Namespace, req.Name, errs.ToAggregate().Error()))
	}
	return admission.Allowed("")
}

// MaxSuspectPlanes bounds the planes one Flux object's suspect names make admission look
// up: an object names one credential, or two; a tenant's object naming thousands would
// cost a read each, as the operator, within every tenant's admission.
const MaxSuspectPlanes = 8

// suspectPlanes are the distinct plane names a Flux object's suspects would be the
// credential of (a string no object could be named is no plane's). Pure.
func suspectPlanes(suspects []tenancy.NamedString) []string {
	var names []string
	for _, s := range suspects {
		name := strings.TrimSuffix(s.Value, cpv1.ApplierKubeconfigSuffix)
		if len(validation.IsDNS1123Subdomain(name)) == 0 && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// suspectPlane reads the plane a suspect name would be the credential of (nil: none):
// from the manager's cache, which holds every plane, and, only when it has none of that
// name, from the API server (a plane created a moment ago counts; one read of one object
// comes from etcd at once, where a consistent list waits on the watch cache).
func (w *Webhook) suspectPlane(ctx context.Context, key client.ObjectKey) (*cpv1.ComputePlane, error) {
	p := &cpv1.ComputePlane{}
	if w.Cache != nil {
		switch err := w.Cache.Get(ctx, key, p); {
		case err == nil:
			return p, nil
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading ComputePlane %s from the cache: %w", key, err)
		}
	}
	switch err := w.Reader.Get(ctx, key, p); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading ComputePlane %s: %w", key, err)
	}
	return p, nil
}

// placementErrors is everything wrong with a placement release for its plane: its
// routing, any other mention of the plane's credential, its sources, what it asks of
// Flux's shared controllers. Pure.
func placementErrors(obj map[string]any, plane *cpv1.ComputePlane, policy cpv1.PlacementReleasePolicy) field.ErrorList {
	errs := routingErrors(obj, routeFor(plane))
	errs = append(errs, tenancy.CredentialErrors("HelmRelease", true, tenancy.SuspectNames(obj), []cpv1.ComputePlane{*plane})...)
	errs = append(errs, sourceErrors(obj, plane.Namespace, policy.SourceNamespaces)...)
	return append(errs, boundErrors(obj, boundsOf(policy))...)
}

// releasePolicy is what the plane's class lets its placement releases do; the defaults
// when the class is gone (the plane is not Ready then either).
func (w *Webhook) releasePolicy(ctx context.Context, plane *cpv1.ComputePlane) (cpv1.PlacementReleasePolicy, error) {
	class := &cpv1.ComputePlaneClass{}
	if err := w.Reader.Get(ctx, client.ObjectKey{Name: plane.Spec.ClassName}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return cpv1.PlacementReleasePolicy{}, nil
		}
		return cpv1.PlacementReleasePolicy{}, fmt.Errorf("reading ComputePlaneClass %q: %w", plane.Spec.ClassName, err)
	}
	return class.Spec.PlacementReleases, nil
}

// withinCap refuses a placement release past the number its class allows per plane
// (nil: within it). Unset (a class stored before the field) is the schema's default.
func (w *Webhook) withinCap(ctx context.Context, plane *cpv1.ComputePlane, max int32) *admission.Response {
	if max <= 0 {
		max = DefaultMaxPlacementReleases
	}
	reader := w.Cache
	if reader == nil {
		reader = w.Reader
	}
	// The typed list: the cache's one HelmRelease informer (a metadata-only list would
	// start a second one, of every HelmRelease); counted, never changed, so not copied.
	var releases helmv2.HelmReleaseList
	if err := reader.List(ctx, &releases, client.InNamespace(plane.Namespace),
		client.MatchingLabels{cpv1.PlacementLabel: cpv1.PlacementLabelValue}, client.UnsafeDisableDeepCopy); err != nil {
		resp := admission.Errored(http.StatusInternalServerError, fmt.Errorf("counting the placement releases of %q: %w", plane.Namespace, err))
		return &resp
	}
	if n := len(releases.Items); n >= int(max) {
		resp := admission.Denied(fmt.Sprintf("ComputePlane %s already has %d placement releases, the most its ComputePlaneClass %s allows (spec.placementReleases.maxReleases); delete one, or ask a platform operator for a class that allows more",
			plane.Name, n, plane.Spec.ClassName))
		return &resp
	}
	return nil
}

// onlySuspendChanged reports whether two versions of a release differ in spec.suspend
// alone.
func onlySuspendChanged(old, obj map[string]any) bool {
	without := func(o map[string]any) map[string]any {
		spec, _ := o["spec"].(map[string]any)
		spec = maps.Clone(spec)
		delete(spec, "suspend")
		return spec
	}
	return reflect.DeepEqual(without(old), without(obj))
}

// unsuspends reports whether an update resumes a suspended release.
func unsuspends(old, obj map[string]any) bool {
	return nested(old, "spec", "suspend") == true && nested(obj, "spec", "suspend") != true
}

func containsAny(list []any, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
