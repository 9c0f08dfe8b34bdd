package remote

import (
	"context"
	"fmt"
	"sync"

	"github.com/cozystack/computeplane/remote/posture"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Unenforced returns the policies the plane's API server does not enforce yet. A policy
// that reads back as written may still not be in force: the API server loads new
// policies a moment after they are created. For each policy it sends, as the canary
// user, the policy's canary request as a dry run; the policy is in force once the
// refusal names it (the API server reports which policy refused only in the message),
// or another layer refuses it for the same reason (alsoEnforcedBy).
func Unenforced(ctx context.Context, canary client.Client, p posture.Posture) ([]string, error) {
	return UnenforcedOf(ctx, canary, p, nil)
}

// UnenforcedOf is Unenforced for the named policies only (nil: all of them).
func UnenforcedOf(ctx context.Context, canary client.Client, p posture.Posture, names []string) ([]string, error) {
	canaries := p.Canaries(names)
	// The dry runs are independent: sent at once, a round costs one round trip.
	errs := make([]error, len(canaries))
	var wg sync.WaitGroup
	for i, c := range canaries {
		wg.Go(func() { errs[i] = canary.Create(ctx, c.Request, client.DryRunAll) })
	}
	wg.Wait()
	var out []string
	for i, c := range canaries {
		switch err := errs[i]; {
		case err == nil:
			out = append(out, c.Policy)
		case c.RefusedBy(err):
		default:
			return nil, fmt.Errorf("checking that %s is in force: %w", c.Policy, err)
		}
	}
	return out, nil
}
