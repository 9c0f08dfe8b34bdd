// Package gateaudit judges a plane's gate from the plane's audit log: whether the applier
// wrote while its credential was revoked, and whether the operator issued a credential
// with one of its admission policies known missing. The burst test runs it on every
// plane's log after flapping their gates; it is pure, so its model has table tests.
package gateaudit

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/remote/posture"
)

// Applier is who the applier kubeconfig authenticates as in a plane.
const Applier = "system:serviceaccount:" + posture.ApplierNamespace + ":" + posture.ApplierName

// RevocationWindow bounds how long a revocation takes to take effect once the applier's
// impersonation RoleBinding is deleted: the plane's apiserver checks impersonation
// against its own cache of RoleBindings, so a request received a few milliseconds after
// the deletion completed may still pass. The applier's ServiceAccount, deleted next, is
// no cut: the apiserver caches a token's successful authentication for 10 s.
const RevocationWindow = 100 * time.Millisecond

// Result is what a plane's audit log says about its gate.
type Result struct {
	// Violations: writes by the applier while the gate was closed, and credentials issued
	// (or the applier's binding written back) after the operator had found a policy
	// missing. Each is a sentence.
	Violations []string
	// Raced: writes received while the revocation was taking effect (RevocationWindow).
	Raced []string
	// Writes counts the applier's writes; Closings the revocations.
	Writes, Closings int
	// Detect is, per closing after a drift, drift → the applier's binding deleted.
	Detect []time.Duration
	// Trail is the writes and policy reads in the order judged, for a failure's log.
	Trail []string
}

// Judge reads a plane's audit log in the order its apiserver received the requests.
// tenantNamespace is the deployer's namespace in the plane (the applier's impersonation
// binding lives there); policies are the operator's admission policy names. The
// applier may do nothing but impersonate the deployer, through its impersonation
// RoleBinding: the gate is closing from the completion of the operator's deletion of
// that binding, and closed RevocationWindow later, until the operator writes the binding
// again (reopening: a token cached from before then authenticates and is authorized) or
// issues the applier a new token. A write by the applier while closed is a violation; one
// while closing raced the revocation. A token issued, or the binding written back, while
// one of the policies is deleted (by anyone but the operator) is a violation when the
// operator had asked for that policy after its deletion (it knew: a pass reads each
// policy by name, and a NotFound is how it learns); before that it is the drift's
// detection time, which is measured. The watches' lists are signals, not what a pass
// decides on.
func Judge(events []devenv.AuditEvent, tenantNamespace string, policies []string) Result {
	impersonation := func(r *devenv.AuditObjectRef) bool {
		return r != nil && r.Resource == "rolebindings" && r.Namespace == tenantNamespace && r.Name == posture.ApplierName && r.Subresource == ""
	}
	// A request is placed at its receipt (authentication and the impersonation check
	// happen then), the revocation at its completion: a write received while the
	// binding's deletion was in flight was let through before it took effect.
	revocation := func(e devenv.AuditEvent) bool {
		return e.Verb == "delete" && impersonation(e.ObjectRef)
	}
	when := func(e devenv.AuditEvent) time.Time {
		if revocation(e) {
			return e.StageTime
		}
		return e.RequestReceived
	}
	events = append([]devenv.AuditEvent(nil), events...)
	sort.SliceStable(events, func(a, b int) bool { return when(events[a]).Before(when(events[b])) })
	owned := map[string]bool{}
	for _, n := range policies {
		owned[n] = true
	}
	var (
		res     Result
		closing time.Time // the impersonation binding's deletion completed
		closed  bool
		missing = map[string]time.Time{} // policy → when it was deleted
		read    = map[string]time.Time{} // policy → the operator's last GET of it, whatever the answer
	)
	// opened checks a credential issued or a binding written back against the policies
	// known missing.
	opened := func(what string, at time.Time) {
		for _, name := range slices.Sorted(maps.Keys(missing)) {
			if since := missing[name]; read[name].After(since) {
				res.Violations = append(res.Violations, fmt.Sprintf("the operator %s at %s although it had asked for %s at %s, after its deletion (%s)",
					what, at.Format(time.RFC3339Nano), name, read[name].Format(time.RFC3339Nano), since.Format(time.RFC3339Nano)))
			}
		}
		closed, closing = false, time.Time{}
	}
	for _, e := range events {
		r := e.ObjectRef
		if r != nil && e.Stage == "ResponseComplete" && e.User.Username == devenv.AdminUser && e.Verb == "get" &&
			r.Resource == "validatingadmissionpolicies" {
			read[r.Name] = when(e)
		}
		if !e.Succeeded() || r == nil {
			continue
		}
		at := when(e)
		if !closing.IsZero() && !closed && at.Sub(closing) > RevocationWindow {
			closed = true
		}
		if r.Resource != "secrets" && r.Resource != "configmaps" && (e.Mutating() || r.Resource == "validatingadmissionpolicies") {
			res.Trail = append(res.Trail, fmt.Sprintf("%s %s %s %s/%s %s/%s", at.Format("15:04:05.000000"), e.User.Username, e.Verb, r.Resource, r.Subresource, r.Namespace, r.Name))
		}
		switch {
		case e.User.Username == Applier:
			if !e.Mutating() {
				continue
			}
			res.Writes++
			switch {
			case closed:
				res.Violations = append(res.Violations, fmt.Sprintf("the applier %s %s %s/%s at %s while the gate was closed",
					e.Verb, r.Resource, r.Namespace, r.Name, at.Format(time.RFC3339Nano)))
			case !closing.IsZero():
				res.Raced = append(res.Raced, fmt.Sprintf("the applier %s %s %s/%s at %s raced the revocation (%s after its impersonation binding's deletion completed)",
					e.Verb, r.Resource, r.Namespace, r.Name, at.Format(time.RFC3339Nano), at.Sub(closing)))
			}
		case e.User.Username != devenv.AdminUser:
			// Someone else's drift.
			if r.Resource == "validatingadmissionpolicies" && owned[r.Name] && e.Verb == "delete" {
				missing[r.Name] = at
			}
		case r.Resource == "validatingadmissionpolicies":
			if e.Mutating() && owned[r.Name] && e.Verb != "delete" {
				delete(missing, r.Name) // restored
			}
		case revocation(e):
			if closing.IsZero() && !closed {
				res.Closings++
				if first := earliest(missing); !first.IsZero() {
					res.Detect = append(res.Detect, at.Sub(first))
				}
				closing = at
			}
		case impersonation(r) && e.Mutating():
			if !closing.IsZero() || closed {
				opened("wrote the applier's impersonation binding back", at)
			}
		case r.Resource == "serviceaccounts" && r.Namespace == posture.ApplierNamespace && r.Name == posture.ApplierName &&
			e.Verb == "create" && r.Subresource == "token":
			opened("issued the applier a token", at)
		}
	}
	return res
}

func earliest(m map[string]time.Time) time.Time {
	var first time.Time
	for _, t := range m {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}
