// Package ssa is the one server-side apply and compare engine, for both clusters: the
// management cluster (provisioning, egress, grants, identities) and each plane
// (hardening). Apply writes what the operator wants with a field owner and reads it back;
// Verify compares without writing; Comparisons remembers which versions already matched,
// so a steady reconcile compares nothing twice; Matches and Covers are the pure
// comparison of a live object with a wanted one.
package ssa

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// ApplyResult says what Apply did.
type ApplyResult int

const (
	// Unchanged: the live object already holds the wanted content; nothing was written.
	Unchanged ApplyResult = iota
	// Created: the object did not exist.
	Created
	// Updated: the wanted content changed since the operator last applied it.
	Updated
	// Restored: the object had been changed by someone else and was put back: drift.
	Restored
)

// Wrote reports whether Apply wrote.
func (r ApplyResult) Wrote() bool { return r != Unchanged }

// Apply server-side applies obj as fieldOwner, with force, unless the live object
// already holds every field obj sets with the same value (Matches). exact names
// top-level fields (such as "spec") whose live value must equal the wanted one with
// nothing added: fields that decide security, where an extra key (a selector
// expression, a rule) changes the meaning. It reads through c, so with a cached client a
// reconcile with nothing to change makes no request at all; it serves both the
// management cluster and a plane's own API.
func Apply(ctx context.Context, c client.Client, obj client.Object, fieldOwner string, exact ...string) (ApplyResult, error) {
	return (*Comparisons)(nil).Apply(ctx, c, obj, fieldOwner, exact...)
}

// Apply is Apply, remembering what it found to match.
func (m *Comparisons) Apply(ctx context.Context, c client.Client, obj client.Object, fieldOwner string, exact ...string) (ApplyResult, error) {
	live, matched, err := m.compare(ctx, c, obj, exact)
	if err != nil || matched {
		return Unchanged, err
	}
	u, err := ApplyObject(obj)
	if err != nil {
		return Unchanged, err
	}
	hash, err := contentHash(u.Object)
	if err != nil {
		return Unchanged, err
	}

	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[cpv1.AppliedHashAnnotation] = hash
	u.SetAnnotations(annotations)
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return Unchanged, fmt.Errorf("applying %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	switch {
	case live == nil:
		return Created, nil
	case live.GetAnnotations()[cpv1.AppliedHashAnnotation] == hash:
		return Restored, nil
	default:
		return Updated, nil
	}
}

// Verify reports whether the live object holds what Apply would write (as Matches and
// exact say), reading through c. A missing or deleting object does not.
func Verify(ctx context.Context, c client.Reader, obj client.Object, exact ...string) (bool, error) {
	return (*Comparisons)(nil).Verify(ctx, c, obj, exact...)
}

// Verify is Verify, remembering what it found to match.
func (m *Comparisons) Verify(ctx context.Context, c client.Reader, obj client.Object, exact ...string) (bool, error) {
	_, matched, err := m.compare(ctx, c, obj, exact)
	return matched, err
}

// getLive reads the live object into its typed form when the client's scheme knows the
// kind (so a cached client reuses the informer it already has), else unstructured.
// A missing object is nil.
func getLive(ctx context.Context, c client.Reader, gvk schema.GroupVersionKind, key client.ObjectKey) (client.Object, error) {
	var live client.Object
	if s, ok := c.(interface{ Scheme() *runtime.Scheme }); ok && s.Scheme().Recognizes(gvk) {
		o, err := s.Scheme().New(gvk)
		if err != nil {
			return nil, err
		}
		live = o.(client.Object)
	} else {
		lu := &unstructured.Unstructured{}
		lu.SetGroupVersionKind(gvk)
		live = lu
	}
	if err := c.Get(ctx, key, live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return live, nil
}

// AppliedHash is the hash Apply records for obj.
func AppliedHash(obj client.Object) (string, error) {
	u, err := ApplyObject(obj)
	if err != nil {
		return "", err
	}
	return contentHash(u.Object)
}

// ApplyObject turns a typed or unstructured object into the unstructured form server-
// side apply takes, without the zero values typed structs carry (creationTimestamp,
// empty status) that would otherwise be claimed by the operator's field manager.
func ApplyObject(obj client.Object) (*unstructured.Unstructured, error) {
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

// Normalized is v as plain JSON values (numbers as float64), so a typed live object
// and an unstructured wanted one compare field by field.
func Normalized(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

func contentHash(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// ForceApply applies obj with server-side apply as fieldOwner, taking over fields other
// managers own, without reading it back (the caller verifies).
func ForceApply(ctx context.Context, c client.Client, obj client.Object, fieldOwner string) error {
	u, err := ApplyObject(obj)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}
