package computeplane

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/remote/posture"
)

// The kube-apiserver loads admission policies on a fixed refresh (every second:
// k8s.io/apiserver pkg/admission/plugin/policy/generic/policy_source.go,
// policyRefreshIntervalDefault), so a new policy comes into force up to a second after
// it is written. enforcementPoll is how often the canaries look meanwhile (a round of
// dry runs costs a few milliseconds), within enforcementWait of the policies first found
// unproven; past it a pass looks once and lets the worker go (a plane that never
// enforces its policies must not hold a worker), and looks again after
// enforcementRetry.
const (
	enforcementPoll  = 50 * time.Millisecond
	enforcementWait  = 1500 * time.Millisecond
	enforcementRetry = time.Second
)

// unproven is a posture written and read back whose policies this pass has not yet seen
// in force.
type unproven struct {
	posture posture.Posture
	canary  client.Client
	// written: this pass wrote some of the policies.
	written bool
}

func isPolicy(what string) bool { return strings.HasPrefix(what, "ValidatingAdmissionPolicy") }

// reconcileEnforcement proves a newly written posture in force: each policy refuses the
// dry run its canary sends (remote/canaries.go). Until then the admission stage is not
// True and no identity or credential is issued. It waits within the pass, while the
// API server loads the policies, so that the gate opens in the pass that proves them.
func (r *Reconciler) reconcileEnforcement(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.unproven == nil {
		return ctrl.Result{}, nil
	}
	key := client.ObjectKeyFromObject(s.plane)
	budget := max(enforcementWait-r.unprovenFor(key, time.Now(), s.unproven.written), time.Millisecond)
	want, canary := s.unproven.posture, s.unproven.canary
	pending, err := remote.Unenforced(ctx, canary, want)
	if err == nil && len(pending) > 0 {
		// The API server loads all new policies on one refresh: while the first pending
		// one is not in force, none is; once it is, look at the rest. (The requests run
		// on the pass's context: the poll's deadline only ends the polling.)
		err = wait.PollUntilContextTimeout(ctx, enforcementPoll, budget, false, func(context.Context) (bool, error) {
			first, err := remote.UnenforcedOf(ctx, canary, want, pending[:1])
			if err != nil || len(first) > 0 {
				return false, err
			}
			pending, err = remote.UnenforcedOf(ctx, canary, want, pending)
			return len(pending) == 0, err
		})
	}
	switch {
	case err == nil:
	case len(pending) > 0 && wait.Interrupted(err) && ctx.Err() == nil:
		s.observe(cpv1.AdmissionCondition, stageFalse(cpv1.NotEnforcedReason,
			"the plane's API server does not enforce %v yet (a dry-run request they must refuse was accepted); looking again shortly", pending))
		s.waiting = true
		return ctrl.Result{RequeueAfter: enforcementRetry}, nil
	default:
		return ctrl.Result{}, err
	}
	s.unproven = nil
	r.proven(key)
	s.observe(cpv1.AdmissionCondition, stageTrue(cpv1.SucceededReason, admissionInForce()))
	r.setVerified(key, cpv1.PodSecurityCondition, true)
	return ctrl.Result{}, nil
}

func admissionInForce() string {
	return fmt.Sprintf("Admission policies %v and their bindings are in place", posture.PolicyNames())
}
