package remote

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CanaryUser is who the operator impersonates, with the group system:masters, to check
// that the plane's API server enforces the policies: a cluster administrator who is
// neither the operator nor an exempt ServiceAccount, so every policy applies to it.
const CanaryUser = "computeplane:admission-canary"

// CanaryServiceAccount is what the pod hardening canary's pod runs as (the pod is never
// created: the requests are dry runs); it has no rights and mounts no token. The
// deployer-credentials canary's pod runs as the operator namespace's ServiceAccount of
// the deployer's name, which has no rights either (Posture.PlacementObjects).
const CanaryServiceAccount = "computeplane-canary"

// Unenforced returns the policies the plane's API server does not enforce yet. A policy
// that reads back as written may still not be in force: the API server loads new
// policies a moment after they are created. For each policy it sends, as the canary
// user, the policy's canary request as a dry run; the policy is in force once the
// refusal names it (the API server reports which policy refused only in the message),
// or another layer refuses it for the same reason (alsoEnforcedBy).
func (p Posture) Unenforced(ctx context.Context, canary client.Client) ([]string, error) {
	return p.UnenforcedOf(ctx, canary, nil)
}

// UnenforcedOf is Unenforced for the named policies only (nil: all of them).
func (p Posture) UnenforcedOf(ctx context.Context, canary client.Client, names []string) ([]string, error) {
	var pols []policy
	for _, pol := range p.policies() {
		if names == nil || slices.Contains(names, policyPrefix+pol.name) {
			pols = append(pols, pol)
		}
	}
	// The dry runs are independent: sent at once, a round costs one round trip.
	errs := make([]error, len(pols))
	var wg sync.WaitGroup
	for i, pol := range pols {
		wg.Go(func() { errs[i] = canary.Create(ctx, pol.canary(p.Labels), client.DryRunAll) })
	}
	wg.Wait()
	var out []string
	for i, pol := range pols {
		name := policyPrefix + pol.name
		err := errs[i]
		switch {
		case err == nil:
			out = append(out, name)
		case strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+name+"'"):
		case pol.alsoEnforcedBy != "" && strings.Contains(err.Error(), pol.alsoEnforcedBy):
		default:
			return nil, fmt.Errorf("checking that %s is in force: %w", name, err)
		}
	}
	return out, nil
}
