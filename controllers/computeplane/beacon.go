package computeplane

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// CheckCapabilityLabel refuses a beacon key the shipped namespace guard would not let
// the operator set.
func CheckCapabilityLabel(key string) error {
	if key == "" || strings.HasPrefix(key, cpv1.CapabilityLabelPrefix) && len(key) > len(cpv1.CapabilityLabelPrefix) {
		return nil
	}
	return fmt.Errorf("the capability label %q must start with %q (the only labels the operator may set on a namespace it did not create), or be empty to announce nothing", key, cpv1.CapabilityLabelPrefix)
}

// signalCapability labels the namespace key=plane while ready, and removes the label
// (if it names this plane) otherwise. It reads the namespace from the cache and writes
// only what differs.
func (r *Reconciler) signalCapability(ctx context.Context, namespace, plane string, ready bool) error {
	if r.CapabilityLabel == "" {
		return nil
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	have, set := ns.Labels[r.CapabilityLabel]
	if ready && have == plane || !ready && (!set || have != plane) {
		return nil
	}
	var value any // null: removed
	if ready {
		value = plane
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{r.CapabilityLabel: value}}})
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(r.Patch(ctx, ns, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldOwner)))
}
