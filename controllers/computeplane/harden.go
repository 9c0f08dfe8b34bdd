package computeplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/controllers/tenancy"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/remote/posture"
)

// reconcileHardening hardens the plane through its admin kubeconfig: admission policies,
// placement namespaces with quota and limits, Pod Security labels on every namespace.
// Each condition turns True only after reading the result back from the plane. A
// verified plane found changed is reported Drifted first, then restored on the next pass,
// so the gate visibly closes while the plane is not as the operator left it.
func (r *Reconciler) reconcileHardening(ctx context.Context, s *scope) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(s.plane)
	plane, res, reached, err := r.reachPlane(ctx, s)
	if !reached {
		return res, err
	}
	s.read.fingerprint = planeFingerprint(s)
	quiet, why := r.quietPlane(s, key)
	if quiet {
		// Ready, and nothing a full read looks at changed since the last one (the
		// watches follow all of it): the probe Get just made is this pass's look.
		s.quiet = true
		return ctrl.Result{RequeueAfter: r.restRequeue(key)}, nil
	}
	planeFullReads.WithLabelValues(why).Inc()
	s.read.mark, s.read.watched = r.Planes.Mark(key)
	ctrl.LoggerFrom(ctx).V(1).Info("reading the plane in full", "reason", why, "mark", s.read.mark)
	want := postureFor(s.plane, s.class, plane.Identity)

	wasVerified := r.wasVerified(key, cpv1.PodSecurityCondition, verified(s.plane))
	var early []string
	if !wasVerified && r.repairWait(key, time.Now()) == 0 {
		// Nothing to report as drift and no back-off to respect: the policies go out
		// first, so the API server's next policy refresh (the wait for their proof) starts
		// while the rest is read and written.
		if early, err = remote.WritePolicies(ctx, plane.Client, want, remote.FieldOwner); err != nil {
			return ctrl.Result{}, err
		}
	}
	found, err := remote.Inspect(ctx, plane.Client, want)
	if err != nil {
		return ctrl.Result{}, err
	}
	if conflict := foreignPlacementNamespaces(found); conflict != "" {
		s.observe(cpv1.ValidCondition, stageTerminal(cpv1.PlacementNamespaceConflictReason, "%s", conflict))
		// The plane's namespace watch wakes the plane when the namespace goes.
		return ctrl.Result{RequeueAfter: r.jitter()}, nil
	}
	if found.Drifted() {
		if res, proceed := r.beforeRepair(s, cpv1.PodSecurityCondition, append(found.Admission, found.PodSecurity...), wasVerified, func() {
			observeFindings(s, found, cpv1.DriftedReason, "drifted, restoring")
		}); !proceed {
			return res, nil
		}
	}
	wrote, res, done, err := r.restorePosture(ctx, s, plane, want, found, wasVerified)
	if !done {
		return res, err
	}
	if !wasVerified {
		// Written is not in force: the API server loads new policies on its next refresh.
		// The management-side stages go on meanwhile; reconcileEnforcement proves each
		// policy in force before the identities and the credential.
		canary, err := plane.Canary()
		if err != nil {
			return ctrl.Result{}, err
		}
		delete(s.results, cpv1.AdmissionCondition)
		s.unproven = &unproven{posture: want, canary: canary, written: len(early) > 0 || slices.ContainsFunc(wrote, isPolicy)}
		return ctrl.Result{RequeueAfter: r.jitter()}, nil
	}
	r.setVerified(key, cpv1.PodSecurityCondition, true)
	// The plane's objects are watched; this periodic look is a safety net for a missed
	// event (a watch re-established after the plane was unreachable, say).
	return ctrl.Result{RequeueAfter: r.jitter()}, nil
}

// reachPlane is the plane's connection, once its API answers. reached is false when the
// phase must return res: a blip keeps what the conditions said and looks again shortly;
// past the grace the gate closes (a plane that cannot be reached cannot be deployed to
// either).
func (r *Reconciler) reachPlane(ctx context.Context, s *scope) (plane *remote.Plane, res ctrl.Result, reached bool, err error) {
	plane, err = r.Planes.Get(ctx, client.ObjectKeyFromObject(s.plane), s.admin)
	var unreachable *remote.UnreachableError
	switch {
	case errors.As(err, &unreachable):
		s.waiting = true
		if !unreachable.Past {
			return nil, ctrl.Result{RequeueAfter: r.jitter() / 4}, false, nil
		}
		s.observe(cpv1.PodSecurityCondition, stageFalse(cpv1.PlaneUnreachableReason,
			"%v; placement stays closed until it answers again", unreachable))
		return nil, ctrl.Result{RequeueAfter: r.jitter()}, false, nil
	case err != nil:
		return nil, ctrl.Result{}, false, err
	}
	return plane, ctrl.Result{}, true, nil
}

// restorePosture writes what differs from the posture (and labels new namespaces), then
// reads it back and says so in the conditions; it returns what it wrote. done is false
// when the phase must return res: something changed between the look and the write on a
// verified plane (drift too, repaired already: reported, so the gate visibly closed), or
// the read-back still differs.
func (r *Reconciler) restorePosture(ctx context.Context, s *scope, plane *remote.Plane, want posture.Posture, found remote.Findings, wasVerified bool) (wrote []string, res ctrl.Result, done bool, err error) {
	wrote, labelled, err := remote.Harden(ctx, plane.Client, want, remote.FieldOwner)
	if err != nil {
		return nil, ctrl.Result{}, false, err
	}
	if len(labelled) > 0 {
		r.Events.Eventf(s.plane, nil, corev1.EventTypeNormal, "NamespacesLabelled", "Harden",
			"Pod Security labels set on new namespaces %v", labelled)
	}
	if wasVerified && len(wrote) > 0 {
		return wrote, r.reportDrift(s, client.ObjectKeyFromObject(s.plane), cpv1.PodSecurityCondition, wrote, func() {
			observeFindings(s, writtenFindings(wrote), cpv1.DriftedReason, "drifted, restoring")
		}), false, nil
	}
	if len(wrote)+len(labelled) > 0 {
		if found, err = remote.Inspect(ctx, plane.Client, want); err != nil {
			return nil, ctrl.Result{}, false, err
		}
	}
	observeFindings(s, found, cpv1.NotVerifiedReason, "not as applied on read-back")
	if !found.Empty() {
		s.waiting = true
		return wrote, ctrl.Result{RequeueAfter: r.jitter()}, false, nil
	}
	return wrote, ctrl.Result{}, true, nil
}

// writtenFindings sorts what Harden had to write back into the stages that own it: the
// admission policies and their bindings, and the rest (namespaces and what they hold).
func writtenFindings(wrote []string) remote.Findings {
	var f remote.Findings
	for _, w := range wrote {
		if isPolicy(w) {
			f.Admission = append(f.Admission, w)
		} else {
			f.PodSecurity = append(f.PodSecurity, w)
		}
	}
	return f
}

func observeFindings(s *scope, f remote.Findings, reason, what string) {
	if problems := append(append([]string(nil), f.PodSecurity...), prefixed("new namespace ", f.New)...); len(problems) > 0 {
		s.observe(cpv1.PodSecurityCondition, stageFalse(reason, "%s: %s", what, strings.Join(problems, "; ")))
	} else {
		level, version := s.class.Spec.PodSecurity.Level, s.class.Spec.PodSecurity.Version
		s.observe(cpv1.PodSecurityCondition, stageTrue(cpv1.SucceededReason, fmt.Sprintf(
			"Pod Security %s (%s) enforced and read back on every namespace but %v; placement namespaces %v ready",
			level, version, s.class.Spec.PodSecurity.ExemptNamespaces, tenancy.PlacementNamespaces(s.plane))))
	}
	if len(f.Admission) > 0 {
		s.observe(cpv1.AdmissionCondition, stageFalse(reason, "%s: %s", what, strings.Join(f.Admission, "; ")))
	} else {
		s.observe(cpv1.AdmissionCondition, stageTrue(cpv1.SucceededReason, admissionInForce()))
	}
}

func prefixed(prefix string, items []string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = prefix + it + " is not labelled"
	}
	return out
}

// verified reports whether both hardening conditions were True: a difference found now
// is drift, not a first rollout. (What the plane cache recorded wins over this status,
// which may be stale.)
func verified(p *cpv1.ComputePlane) bool {
	return apimeta.IsStatusConditionTrue(p.Status.Conditions, cpv1.PodSecurityCondition) &&
		apimeta.IsStatusConditionTrue(p.Status.Conditions, cpv1.AdmissionCondition)
}

// foreignPlacementNamespaces says, as a person acts on it, which namespaces the spec
// lists for placement that exist in the plane but are not the operator's ("" if none).
func foreignPlacementNamespaces(found remote.Findings) string {
	if len(found.Claimed) > 0 {
		return fmt.Sprintf("the class's podSecurity.exemptNamespaces lists %s, which the operator created in the plane for placement releases (the tenant's objects and service accounts are inside); "+
			"the operator never exempts such a namespace (its workloads would run privileged and its service accounts be trusted like the operator), and keeps it at the class's level: remove it from exemptNamespaces, or delete it from the plane",
			strings.Join(found.Claimed, ", "))
	}
	if len(found.Foreign) == 0 {
		return ""
	}
	return fmt.Sprintf("spec.placementNamespaces lists %s, which already exist(s) in the plane and was not created by the operator for this plane; "+
		"the operator never adopts a namespace (binding the deployer there would hand placement releases whatever it holds): choose another name, or remove the namespace from the plane",
		strings.Join(found.Foreign, ", "))
}

func postureFor(p *cpv1.ComputePlane, class *cpv1.ComputePlaneClass, operator string) posture.Posture {
	return posture.Posture{
		Level:               string(class.Spec.PodSecurity.Level),
		Version:             class.Spec.PodSecurity.Version,
		Exempt:              class.Spec.PodSecurity.ExemptNamespaces,
		Operator:            operator,
		Trusted:             class.Spec.TrustedIdentities(),
		PlacementNamespaces: tenancy.PlacementNamespaces(p),
		Quota:               posture.BoundedQuota(class.Spec.PlacementNamespaces.Quota),
		LimitRange:          class.Spec.PlacementNamespaces.LimitRange,
		Labels:              render.PlaneLabels(p),
	}
}
