package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/remote"
)

// HardeningFieldOwner is the field manager of what the operator applies inside a plane.
const HardeningFieldOwner = "computeplane-hardening"

// Reasons of the hardening conditions.
const (
	// PlaneUnreachableReason: the plane's API server has not answered for longer than
	// the grace period; the gate stays closed.
	PlaneUnreachableReason = "PlaneUnreachable"
	// DriftedReason: something the operator applied was removed or changed; the message
	// names it, and the operator restores it.
	DriftedReason = "Drifted"
	// NotVerifiedReason: the read-back after applying still found differences.
	NotVerifiedReason = "NotVerified"
	// NotEnforcedReason: the policies read back as written, but the plane's API server
	// does not refuse what they forbid yet (it loads new policies a moment later).
	NotEnforcedReason = "NotEnforced"
)

// reconcileHardening hardens the plane through its admin kubeconfig: admission policies,
// placement namespaces with quota and limits, Pod Security labels on every namespace.
// Each condition turns True only after reading the result back from the plane. A
// verified plane found changed is reported Drifted first, then restored on the next pass,
// so the gate visibly closes while the plane is not as the operator left it.
func (r *ComputePlaneReconciler) reconcileHardening(ctx context.Context, s *scope) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(s.plane)
	plane, err := r.Planes.Get(ctx, key, s.admin)
	var unreachable *remote.UnreachableError
	switch {
	case errors.As(err, &unreachable):
		s.waiting = true
		if !unreachable.Past {
			// A blip: keep what the conditions said and look again shortly. A plane
			// that cannot be reached cannot be deployed to either; past the grace the
			// gate closes.
			return ctrl.Result{RequeueAfter: r.jitter() / 4}, nil
		}
		s.observe(cpv1.PodSecurityCondition, stageFalse(PlaneUnreachableReason,
			"%v; placement stays closed until it answers again", unreachable))
		return ctrl.Result{RequeueAfter: r.jitter()}, nil
	case err != nil:
		return ctrl.Result{}, err
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
	posture := postureFor(s.plane, s.class, plane.Identity)

	wasVerified := r.wasVerified(key, cpv1.PodSecurityCondition, verified(s.plane))
	var early []string
	if !wasVerified && r.repairWait(key, time.Now()) == 0 {
		// Nothing to report as drift and no back-off to respect: the policies go out
		// first, so the API server's next policy refresh (the wait for their proof) starts
		// while the rest is read and written.
		if early, err = remote.WritePolicies(ctx, plane.Client, posture, HardeningFieldOwner); err != nil {
			return ctrl.Result{}, err
		}
	}
	found, err := remote.Inspect(ctx, plane.Client, posture)
	if err != nil {
		return ctrl.Result{}, err
	}
	if conflict := foreignPlacementNamespaces(found); conflict != "" {
		s.observe(cpv1.ValidCondition, stageTerminal(cpv1.PlacementNamespaceConflictReason, "%s", conflict))
		// The plane's namespace watch wakes the plane when the namespace goes.
		return ctrl.Result{RequeueAfter: r.jitter()}, nil
	}
	if wasVerified && found.Drifted() {
		return r.reportDrift(s, key, cpv1.PodSecurityCondition, append(found.Admission, found.PodSecurity...), func() {
			observeFindings(s, found, DriftedReason, "drifted, restoring")
		}), nil
	}

	if found.Drifted() {
		if wait := r.repairWait(key, time.Now()); wait > 0 {
			// A repeated drift backs off: keep the conditions it set and repair later.
			s.waiting = true
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	wrote, labelled, err := remote.Harden(ctx, plane.Client, posture, HardeningFieldOwner)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(labelled) > 0 {
		r.Events.Eventf(s.plane, nil, corev1.EventTypeNormal, "NamespacesLabelled", "Harden",
			"Pod Security labels set on new namespaces %v", labelled)
	}
	if wasVerified && len(wrote) > 0 {
		// Something changed between the look and the write: that is drift too, repaired
		// already; report it so the gate visibly closed.
		return r.reportDrift(s, key, cpv1.PodSecurityCondition, wrote, func() {
			observeFindings(s, writtenFindings(wrote), DriftedReason, "drifted, restoring")
		}), nil
	}
	if len(wrote)+len(labelled) > 0 {
		if found, err = remote.Inspect(ctx, plane.Client, posture); err != nil {
			return ctrl.Result{}, err
		}
	}
	observeFindings(s, found, NotVerifiedReason, "not as applied on read-back")
	if !found.Empty() {
		s.waiting = true
		return ctrl.Result{RequeueAfter: r.jitter()}, nil
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
		s.unproven = &unproven{posture: posture, canary: canary, written: len(early) > 0 || slices.ContainsFunc(wrote, isPolicy)}
		return ctrl.Result{RequeueAfter: r.jitter()}, nil
	}
	r.setVerified(key, cpv1.PodSecurityCondition, true)
	// The plane's objects are watched; this periodic look is a safety net for a missed
	// event (a watch re-established after the plane was unreachable, say).
	return ctrl.Result{RequeueAfter: r.jitter()}, nil
}

// restRequeue is when a quiet plane needs its next pass: when its settled read ends (a
// resync or a token's renewal), if the plane cache probes it meanwhile (its watches and
// a failed probe wake it before then, and every management object the operator keeps
// for it is watched); otherwise after the requeue interval.
func (r *ComputePlaneReconciler) restRequeue(key client.ObjectKey) time.Duration {
	if until, ok := r.Planes.SettledUntil(key); ok {
		return max(time.Until(until), time.Second)
	}
	return r.jitter()
}

// unproven is a posture written and read back whose policies this pass has not yet seen
// in force.
type unproven struct {
	posture remote.Posture
	canary  client.Client
	// written: this pass wrote some of the policies.
	written bool
}

func isPolicy(what string) bool { return strings.HasPrefix(what, "ValidatingAdmissionPolicy") }

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

// reconcileEnforcement proves a newly written posture in force: each policy refuses the
// dry run its canary sends (remote/canaries.go). Until then the admission stage is not
// True and no identity or credential is issued. It waits within the pass, while the
// API server loads the policies, so that the gate opens in the pass that proves them.
func (r *ComputePlaneReconciler) reconcileEnforcement(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.unproven == nil {
		return ctrl.Result{}, nil
	}
	key := client.ObjectKeyFromObject(s.plane)
	budget := max(enforcementWait-r.unprovenFor(key, time.Now(), s.unproven.written), time.Millisecond)
	posture, canary := s.unproven.posture, s.unproven.canary
	pending, err := posture.Unenforced(ctx, canary)
	if err == nil && len(pending) > 0 {
		// The API server loads all new policies on one refresh: while the first pending
		// one is not in force, none is; once it is, look at the rest. (The requests run
		// on the pass's context: the poll's deadline only ends the polling.)
		err = wait.PollUntilContextTimeout(ctx, enforcementPoll, budget, false, func(context.Context) (bool, error) {
			first, err := posture.UnenforcedOf(ctx, canary, pending[:1])
			if err != nil || len(first) > 0 {
				return false, err
			}
			pending, err = posture.UnenforcedOf(ctx, canary, pending)
			return len(pending) == 0, err
		})
	}
	switch {
	case err == nil:
	case len(pending) > 0 && wait.Interrupted(err) && ctx.Err() == nil:
		s.observe(cpv1.AdmissionCondition, stageFalse(NotEnforcedReason,
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
	return fmt.Sprintf("Admission policies %v and their bindings are in place", remote.PolicyNames())
}

// quietPlane says whether this pass may skip the plane's full read, or why not.
func (r *ComputePlaneReconciler) quietPlane(s *scope, key client.ObjectKey) (bool, string) {
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

// reportDrift records a drift of a verified plane (observe sets the conditions False/
// Drifted naming what; a Warning event) and asks for the pass that restores it: at once
// the first time, later when drifts repeat, so another writer fighting the operator
// cannot turn it (and the credential the gate revokes and re-issues) into a hot loop.
func (r *ComputePlaneReconciler) reportDrift(s *scope, key client.ObjectKey, stage string, what []string, observe func()) ctrl.Result {
	r.setVerified(key, stage, false)
	delay, n := r.driftDelay(key, time.Now())
	msg := "The plane drifted: " + strings.Join(what, "; ")
	if n > 1 {
		msg += fmt.Sprintf(" (drift %d in a row: something keeps changing what the operator owns; restoring in %s)", n, delay.Round(time.Millisecond))
	}
	r.Events.Eventf(s.plane, nil, corev1.EventTypeWarning, DriftedReason, "Drift", "%s", msg)
	driftRepairs.WithLabelValues(stage).Inc()
	observe()
	return ctrl.Result{RequeueAfter: max(delay, time.Millisecond)}
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
			level, version, s.class.Spec.PodSecurity.ExemptNamespaces, placementNamespaces(s.plane))))
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
	if len(found.Foreign) == 0 {
		return ""
	}
	return fmt.Sprintf("spec.placementNamespaces lists %s, which already exist(s) in the plane and was not created by the operator for this plane; "+
		"the operator never adopts a namespace (binding the deployer there would hand placement releases whatever it holds): choose another name, or remove the namespace from the plane",
		strings.Join(found.Foreign, ", "))
}

// placementNamespaces are the namespaces pre-created in the plane: the one named like
// the ComputePlane's namespace (Flux impersonates the deployer there) and the extra ones
// the spec lists.
func placementNamespaces(p *cpv1.ComputePlane) []string {
	out := []string{p.Namespace}
	for _, n := range p.Spec.PlacementNamespaces {
		if n != p.Namespace {
			out = append(out, n)
		}
	}
	return out
}

func postureFor(p *cpv1.ComputePlane, class *cpv1.ComputePlaneClass, operator string) remote.Posture {
	return remote.Posture{
		Level:               string(class.Spec.PodSecurity.Level),
		Version:             class.Spec.PodSecurity.Version,
		Exempt:              class.Spec.PodSecurity.ExemptNamespaces,
		Operator:            operator,
		PlacementNamespaces: placementNamespaces(p),
		Quota:               class.Spec.PlacementNamespaces.Quota,
		LimitRange:          class.Spec.PlacementNamespaces.LimitRange,
		Labels:              render.PlaneLabels(p),
	}
}
