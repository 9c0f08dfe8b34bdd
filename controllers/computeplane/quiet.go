package computeplane

import (
	"fmt"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// restRequeue is when a quiet plane needs its next pass: when its settled read ends (a
// resync or a token's renewal), if the plane cache probes it meanwhile (its watches and
// a failed probe wake it before then, and every management object the operator keeps
// for it is watched); otherwise after the requeue interval.
func (r *Reconciler) restRequeue(key client.ObjectKey) time.Duration {
	if until, ok := r.Planes.SettledUntil(key); ok {
		return max(time.Until(until), time.Second)
	}
	return r.jitter()
}

// quietPlane says whether this pass may skip the plane's full read, or why not.
func (r *Reconciler) quietPlane(s *scope, key client.ObjectKey) (bool, string) {
	switch {
	case r.ResyncInterval <= 0:
		return false, "Disabled"
	case !apimeta.IsStatusConditionTrue(s.plane.Status.Conditions, cpv1.ReadyCondition):
		return false, "NotReady"
	case reconcileRequested(s.plane):
		// A person's reconcile request always gets a full read.
		return false, "Requested"
	}
	return r.Planes.Quiet(key, s.read.fingerprint, time.Now())
}

// reconcileRequested: the reconcile.fluxcd.io/requestedAt annotation asks for a
// reconcile this controller has not handled yet.
func reconcileRequested(p *cpv1.ComputePlane) bool {
	v, ok := meta.ReconcileAnnotationValue(p.GetAnnotations())
	return ok && v != p.Status.LastHandledReconcileAt
}

// planeFingerprint names what a full read of the plane compares it with: a change of
// the plane's spec, its class or its admin credential needs a full read.
func planeFingerprint(s *scope) string {
	hash := ""
	if s.admin != nil {
		hash = s.admin.Hash
	}
	return fmt.Sprintf("%s/%d/%s/%d/%s", s.plane.UID, s.plane.Generation, s.class.UID, s.class.Generation, hash)
}
