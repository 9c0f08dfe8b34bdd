package remote

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/remote/posture"
	"github.com/cozystack/computeplane/ssa"
)

// ApplyIdentities writes identity objects (posture.Identities, posture.AutoscalerIdentity)
// into the plane, each with the fields that must read back exactly (posture.ExactFields)
// owned outright.
func ApplyIdentities(ctx context.Context, c client.Client, objs []client.Object) error {
	for _, o := range objs {
		if _, err := ssa.Apply(ctx, c, o, FieldOwner, posture.ExactFields(o)...); err != nil {
			return err
		}
	}
	return nil
}

// UnverifiedIdentities names the identity objects that are missing from the plane or
// differ from what the operator writes (content, not existence: an added rule or subject
// grants something), reading the plane directly.
func UnverifiedIdentities(ctx context.Context, c client.Client, objs []client.Object) ([]string, error) {
	var out []string
	for _, o := range objs {
		ok, err := ssa.Verify(ctx, c, o, posture.ExactFields(o)...)
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s %s/%s", o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName()))
		}
	}
	return out, nil
}
