package computeplane

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/remote"
)

// scope carries one reconcile's plane, what it looked up and what each stage observed.
type scope struct {
	plane   *cpv1.ComputePlane
	class   *cpv1.ComputePlaneClass
	results map[string]stageResult
	// namespaceLabels are the labels of the plane's namespace, as validation read them.
	namespaceLabels map[string]string
	// released is set once the finalizer is gone and the object with it.
	released bool
	// deleting says which teardown stage the plane waits on.
	deleting deletionView
	// waiting is set by a phase that polls for something that sends no event; the
	// reconcile then has not finished with this generation.
	waiting bool
	// admin is the plane's admin credential, once provisioning verified it. It never
	// leaves the operator's memory.
	admin *remote.AdminCredential
	// quiet: the plane's watches saw nothing since its last full read, which found it
	// as the operator left it; this pass reads it no further than the probe.
	quiet bool
	// read is the full read this pass makes of the plane, recorded once it is through.
	read planeRead
	// freshSecrets: Secrets are read from the API server, not recalled by version.
	freshSecrets bool
	// unproven: the hardening wrote or first read the posture this pass, and its
	// policies are not yet proven in force (reconcileEnforcement).
	unproven *unproven
}

// planeRead is a full read of a plane, for ClusterCache.Settled.
type planeRead struct {
	mark        uint64
	watched     bool
	fingerprint string
}

func (s *scope) observe(condition string, r stageResult) {
	s.results[condition] = r
}

// failed records that a phase could not finish verifying its stages: unless the phase
// already said why its first stage is not True, that stage is False with the error; a
// later stage of the same phase that it had found True is not reported (it shows as
// blocked behind the first).
func (s *scope) failed(conditions []string, err error) {
	for _, c := range conditions[1:] {
		if r, ok := s.results[c]; ok && r.status == metav1.ConditionTrue {
			delete(s.results, c)
		}
	}
	first := conditions[0]
	if r, ok := s.results[first]; ok && r.status != metav1.ConditionTrue {
		return
	}
	s.observe(first, stageFalse(cpv1.VerificationFailedReason,
		"could not be verified: %v; the gate stays closed and the operator retries with backoff", err))
}

// blocked reports the result of the first stage this reconcile found not True, if any.
func (s *scope) blocked() (stageResult, bool) {
	// Any stage this reconcile found not True closes the gate, not only the last one
	// observed: a phase observes several (hardening: Pod Security, then admission
	// policies), and a drift in the first must not hide behind the second being True.
	for _, c := range cpv1.GatingConditions {
		if r, ok := s.results[c]; ok && r.status != metav1.ConditionTrue {
			return r, true
		}
	}
	return stageResult{}, false
}
