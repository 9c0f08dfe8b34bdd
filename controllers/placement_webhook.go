package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// Paths of the placement webhooks (config/webhook/placement.yaml registers them, with
// an object selector on the placement label, so no other HelmRelease ever waits on the
// operator).
const (
	PlacementMutatePath   = "/mutate-placement-helmrelease"
	PlacementValidatePath = "/validate-placement-helmrelease"
)

// PlacementWebhook routes placement releases at admission, so no stored version of one
// ever lacks its routing: the mutating half fills in what a release leaves out and adds
// the placement finalizer; the validating half (after every mutation) refuses anything
// else, a release in a namespace with no ComputePlane, one created for a plane being
// deleted, and the label's removal. Both work on the JSON object, not Flux's Go types,
// so fields newer than this build's Flux API (a kubeConfig.configMapRef, say) are seen.
type PlacementWebhook struct {
	// Reader reads ComputePlanes from the API, not a cache: a plane created a moment
	// ago counts.
	Reader client.Reader
}

// SetupWithManager registers both halves with the manager's webhook server.
func (w *PlacementWebhook) SetupWithManager(mgr ctrl.Manager) {
	mgr.GetWebhookServer().Register(PlacementMutatePath, &webhook.Admission{Handler: admission.HandlerFunc(w.mutate)})
	mgr.GetWebhookServer().Register(PlacementValidatePath, &webhook.Admission{Handler: admission.HandlerFunc(w.validate)})
}

func (w *PlacementWebhook) mutate(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	obj, err := decode(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !isPlacement(obj) || nested(obj, "metadata", "deletionTimestamp") != nil {
		return admission.Allowed("")
	}
	plane, err := w.planeOf(ctx, req.Namespace)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if plane == nil {
		return admission.Allowed("") // the validating half refuses it, saying why
	}
	routeRelease(obj, routeFor(plane))
	md := ensureMap(obj, "metadata")
	finalizers, _ := md["finalizers"].([]any)
	if !containsAny(finalizers, cpv1.PlacementFinalizer) {
		md["finalizers"] = append(finalizers, cpv1.PlacementFinalizer)
	}
	routed, err := json.Marshal(obj)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, routed)
}

func (w *PlacementWebhook) validate(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	obj, err := decode(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if req.Operation == admissionv1.Update {
		old, err := decode(req.OldObject.Raw)
		if err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if isPlacement(old) && !isPlacement(obj) {
			return admission.Denied(fmt.Sprintf("the %s=%s label cannot be removed from a placement release (it would be applied elsewhere); delete the release instead",
				cpv1.PlacementLabel, cpv1.PlacementLabelValue))
		}
		if isPlacement(obj) && sameRouting(old, obj) {
			// Routing was judged when it was set; Flux's own updates (finalizers, a
			// release whose plane has gone) must not depend on the plane.
			return admission.Allowed("")
		}
		if isPlacement(obj) && nested(obj, "metadata", "deletionTimestamp") != nil {
			return admission.Denied("a placement release being deleted keeps its routing until it is uninstalled from the plane")
		}
	}
	if !isPlacement(obj) {
		return admission.Allowed("")
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
	if errs := routingErrors(obj, routeFor(plane)); len(errs) > 0 {
		return admission.Denied(fmt.Sprintf("placement release %s/%s must be routed into ComputePlane %s only: %s",
			req.Namespace, req.Name, plane.Name, errs.ToAggregate().Error()))
	}
	return admission.Allowed("")
}

// planeOf returns the ComputePlane of a namespace (the oldest live one; a plane being
// deleted when that is all there is), or nil.
func (w *PlacementWebhook) planeOf(ctx context.Context, namespace string) (*cpv1.ComputePlane, error) {
	var planes cpv1.ComputePlaneList
	if err := w.Reader.List(ctx, &planes, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the ComputePlanes of %q: %w", namespace, err)
	}
	return planeOfNamespace(planes.Items), nil
}

// planeOfNamespace picks a namespace's ComputePlane: the oldest live one, or, when all
// are being deleted, one of those.
func planeOfNamespace(planes []cpv1.ComputePlane) *cpv1.ComputePlane {
	if p := oldestPlane(planes); p != nil {
		return p
	}
	if len(planes) > 0 {
		return &planes[0]
	}
	return nil
}

func decode(raw []byte) (map[string]any, error) {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("decoding the HelmRelease: %w", err)
	}
	return obj, nil
}

func containsAny(list []any, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
