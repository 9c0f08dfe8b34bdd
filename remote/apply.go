// Package remote holds everything that talks to a ComputePlane's own API server: the
// per-plane client cache with health probing, hardening, identities and drift
// detection, and the server-side apply helper both clusters share.
package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AppliedHashAnnotation records the hash of what the operator last applied to an object.
// An object whose annotation matches what the operator would apply now is left alone,
// so a reconcile with nothing to change makes no writes (the check reads the
// metadata-only cache).
const AppliedHashAnnotation = "computeplane.cozystack.io/applied-hash"

// ApplyIfChanged server-side applies obj as fieldOwner unless the live object already
// carries the hash of this exact content. It reports whether it wrote. It serves both the
// management cluster and a plane's own API.
func ApplyIfChanged(ctx context.Context, c client.Client, obj client.Object, fieldOwner string) (bool, error) {
	u, err := toApplyObject(obj)
	if err != nil {
		return false, err
	}
	hash, err := contentHash(u.Object)
	if err != nil {
		return false, err
	}
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	switch err := c.Get(ctx, client.ObjectKeyFromObject(u), live); {
	case err == nil && live.Annotations[AppliedHashAnnotation] == hash && live.DeletionTimestamp.IsZero():
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}

	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AppliedHashAnnotation] = hash
	u.SetAnnotations(annotations)
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("applying %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return true, nil
}

// AppliedHash is the hash ApplyIfChanged records for obj: a live object carrying it in
// AppliedHashAnnotation is exactly what the operator applied (unless someone edited it
// and kept the annotation, which only an identity with write access to it can do).
func AppliedHash(obj client.Object) (string, error) {
	u, err := toApplyObject(obj)
	if err != nil {
		return "", err
	}
	return contentHash(u.Object)
}

// toApplyObject turns a typed or unstructured object into the unstructured form server-
// side apply takes, without the zero values typed structs carry (creationTimestamp,
// empty status) that would otherwise be claimed by the operator's field manager.
func toApplyObject(obj client.Object) (*unstructured.Unstructured, error) {
	var m map[string]any
	if u, ok := obj.(*unstructured.Unstructured); ok {
		m = runtime.DeepCopyJSON(u.Object)
	} else {
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	u := &unstructured.Unstructured{Object: m}
	if u.GetAPIVersion() == "" || u.GetKind() == "" {
		return nil, fmt.Errorf("%T %s has no apiVersion/kind", obj, obj.GetName())
	}
	return u, nil
}

func contentHash(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}
