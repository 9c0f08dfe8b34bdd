package computeplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// phase observes one stage into the scope. It returns an error only for transient
// failures (which back off); a stage that is not done records a non-True result.
type phase func(ctx context.Context, s *scope) (ctrl.Result, error)

// step is a phase and the conditions it answers for: when the phase fails, the first
// is what could not be verified, and the others are not True either.
type step struct {
	conditions []string
	run        phase
	// plane marks the phases that talk to the plane: their failure is the plane's.
	plane bool
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	steps := []step{
		{[]string{cpv1.ValidCondition}, r.reconcileValid, false},
		{[]string{cpv1.ProvisionedCondition}, r.reconcileProvisioning, false},
		{[]string{cpv1.PodSecurityCondition, cpv1.AdmissionCondition}, r.reconcileHardening, true},
		{[]string{cpv1.EgressCondition}, r.reconcileEgress, false},
		{[]string{cpv1.NetworkPoliciesCondition}, r.reconcileGrants, false},
		// After the management-side stages: they run while the plane loads new policies.
		{[]string{cpv1.AdmissionCondition}, r.reconcileEnforcement, true},
		{[]string{cpv1.IdentitiesCondition}, r.reconcileIdentities, true},
	}
	passCtx, cancel := r.passContext(ctx)
	defer cancel()
	// What each phase of the pass took, in the debug log: where a plane's time to Ready
	// goes.
	timings := make([]any, 0, 2*len(steps))
	defer func() { ctrl.LoggerFrom(ctx).V(1).Info("pass", timings...) }()
	defer func() {
		if _, said := s.results[cpv1.AdmissionCondition]; s.unproven != nil && !said {
			// The pass ended before it proved the policies it wrote in force.
			s.observe(cpv1.AdmissionCondition, stageFalse(cpv1.NotEnforcedReason,
				"the policies are written and read back, not yet proven in force; looking again shortly"))
		}
	}()
	var result ctrl.Result
	for _, st := range steps {
		started := time.Now()
		res, err := st.run(passCtx, s)
		timings = append(timings, st.conditions[0], time.Since(started).String())
		if err != nil {
			err = r.overran(passCtx, err)
			// Whatever failed, the stage was not verified: it is not True, and the gate
			// closes now rather than after the backoff this error starts.
			s.failed(st.conditions, err)
			if st.plane {
				// Revocation below then does not wait on the same plane a second time.
				r.Planes.Failed(client.ObjectKeyFromObject(s.plane), err)
			}
			if rerr := r.revokeApplierCredential(ctx, s); rerr != nil {
				err = kerrors.NewAggregate([]error{err, rerr})
			}
			return ctrl.Result{}, err
		}
		result = lowestRequeue(result, res)
		if t, blocked := s.blocked(); blocked {
			// The gate is closed: the applier credential must not exist.
			if err := r.revokeApplierCredential(ctx, s); err != nil {
				return ctrl.Result{}, err
			}
			if t.invalidSpec {
				// Not retried: a change to the plane or its class starts a new reconcile.
				return ctrl.Result{}, reconcile.TerminalError(errors.New(t.message))
			}
			return result, nil
		}
		if s.waiting {
			// The phase polls for something (a plane that blipped, say) and said nothing
			// new: later phases would only fail against the same thing.
			return result, nil
		}
	}
	return result, nil
}

// passContext bounds a pass's phases. What must happen whatever the pass took (revoking
// the credential, the status patch) runs on the outer context.
func (r *Reconciler) passContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.PassTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, r.PassTimeout)
}

// overran says so when err comes from the pass running out of time.
func (r *Reconciler) overran(passCtx context.Context, err error) error {
	if !errors.Is(passCtx.Err(), context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("this pass took longer than the operator's --plane-pass-timeout (%s), the plane's API answering too slowly: %w", r.PassTimeout, err)
}

func (r *Reconciler) jitter() time.Duration {
	return wait.Jitter(r.RequeueInterval, 0.2)
}

func lowestRequeue(a, b ctrl.Result) ctrl.Result {
	if a.RequeueAfter == 0 || (b.RequeueAfter > 0 && b.RequeueAfter < a.RequeueAfter) {
		return b
	}
	return a
}
