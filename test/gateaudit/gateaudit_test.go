package gateaudit

import (
	"testing"
	"time"

	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/remote/posture"
)

var t0 = time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)

// at is t0 plus ms milliseconds.
func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// ev is a completed request received at received and completed 2 ms later.
func ev(user, verb, resource, sub, ns, name string, received time.Time, code int) devenv.AuditEvent {
	e := devenv.AuditEvent{Stage: "ResponseComplete", Verb: verb, RequestReceived: received, StageTime: received.Add(2 * time.Millisecond)}
	e.User.Username = user
	e.ObjectRef = &devenv.AuditObjectRef{Resource: resource, Subresource: sub, Namespace: ns, Name: name}
	e.ResponseStatus = &struct {
		Code int `json:"code"`
	}{code}
	return e
}

const (
	tenantNS = "tenant-a"
	admin    = devenv.AdminUser
	tester   = "tester"
)

// The operator's requests and the others', at ms after t0.
func revokeBinding(ms int) devenv.AuditEvent {
	return ev(admin, "delete", "rolebindings", "", tenantNS, posture.ApplierName, at(ms), 200)
}
func revokeAccount(ms int) devenv.AuditEvent {
	return ev(admin, "delete", "serviceaccounts", "", posture.ApplierNamespace, posture.ApplierName, at(ms), 200)
}
func writeBindingBack(ms int) devenv.AuditEvent {
	return ev(admin, "patch", "rolebindings", "", tenantNS, posture.ApplierName, at(ms), 201)
}
func issueToken(ms int) devenv.AuditEvent {
	return ev(admin, "create", "serviceaccounts", "token", posture.ApplierNamespace, posture.ApplierName, at(ms), 201)
}
func applierWrite(ms, code int) devenv.AuditEvent {
	return ev(Applier, "create", "configmaps", "", tenantNS, "release", at(ms), code)
}
func readPolicy(name string, ms, code int) devenv.AuditEvent {
	return ev(admin, "get", "validatingadmissionpolicies", "", "", name, at(ms), code)
}
func deletePolicy(name string, ms int) devenv.AuditEvent {
	return ev(tester, "delete", "validatingadmissionpolicies", "", "", name, at(ms), 200)
}

// TestJudge: the audit model the burst test fails on, case by case.
func TestJudge(t *testing.T) {
	policies := []string{"p1", "p2"}
	for _, tc := range []struct {
		name                                string
		events                              []devenv.AuditEvent
		violations, raced, writes, closings int
		detect                              []time.Duration
	}{
		{name: "a write well after the binding's deletion is a violation",
			events:     []devenv.AuditEvent{revokeBinding(0), applierWrite(150, 201)},
			violations: 1, writes: 1, closings: 1},
		{name: "a write within the window raced the revocation",
			events: []devenv.AuditEvent{revokeBinding(0), applierWrite(50, 201)},
			raced:  1, writes: 1, closings: 1},
		{name: "a write received before the deletion completed came through an open gate",
			// The deletion is received at 0 and completes at 2 ms.
			events: []devenv.AuditEvent{revokeBinding(0), applierWrite(1, 201)},
			writes: 1, closings: 1},
		{name: "the ServiceAccount's deletion is no cut: the binding's is",
			events: []devenv.AuditEvent{revokeAccount(0), applierWrite(500, 201), revokeBinding(600)},
			writes: 1, closings: 1},
		{name: "a refused write is no write",
			events:   []devenv.AuditEvent{revokeBinding(0), applierWrite(500, 403)},
			closings: 1},
		{name: "writing the binding back reopens the gate",
			events: []devenv.AuditEvent{revokeBinding(0), writeBindingBack(1000), applierWrite(1200, 201)},
			writes: 1, closings: 1},
		{name: "a new token reopens the gate",
			events: []devenv.AuditEvent{revokeBinding(0), issueToken(1000), applierWrite(2000, 201)},
			writes: 1, closings: 1},
		{name: "another namespace's binding is not this plane's revocation",
			events: []devenv.AuditEvent{ev(admin, "delete", "rolebindings", "", "tenant-b", posture.ApplierName, at(0), 200), applierWrite(500, 201)},
			writes: 1},
		{name: "a token issued after the operator found the policy missing is a violation",
			events:     []devenv.AuditEvent{deletePolicy("p1", 0), readPolicy("p1", 100, 404), issueToken(200)},
			violations: 1},
		{name: "the binding written back after the operator found the policy missing is a violation",
			events:     []devenv.AuditEvent{revokeBinding(-50), deletePolicy("p1", 0), readPolicy("p1", 100, 404), writeBindingBack(200)},
			violations: 1, closings: 1},
		{name: "a token issued before the operator asked for the missing policy is the drift's detection time",
			events:   []devenv.AuditEvent{deletePolicy("p1", 0), readPolicy("p2", 100, 200), issueToken(200), revokeBinding(1000)},
			closings: 1, detect: []time.Duration{1002 * time.Millisecond}},
		{name: "a policy restored is not missing",
			events: []devenv.AuditEvent{deletePolicy("p1", 0), readPolicy("p1", 100, 404),
				ev(admin, "patch", "validatingadmissionpolicies", "", "", "p1", at(150), 201), issueToken(300)}},
		{name: "the watches' lists are not a pass's read",
			events: []devenv.AuditEvent{deletePolicy("p1", 0), ev(admin, "list", "validatingadmissionpolicies", "", "", "", at(100), 200), issueToken(200)}},
		{name: "a policy that is not the operator's is no drift",
			events: []devenv.AuditEvent{deletePolicy("other", 0), readPolicy("other", 100, 404), issueToken(200)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Judge(tc.events, tenantNS, policies)
			if len(got.Violations) != tc.violations || len(got.Raced) != tc.raced || got.Writes != tc.writes || got.Closings != tc.closings {
				t.Errorf("violations %d %q, raced %d, writes %d, closings %d; want %d, %d, %d, %d\ntrail: %q",
					len(got.Violations), got.Violations, len(got.Raced), got.Writes, got.Closings,
					tc.violations, tc.raced, tc.writes, tc.closings, got.Trail)
			}
			if len(got.Detect) != len(tc.detect) {
				t.Fatalf("detect %v, want %v", got.Detect, tc.detect)
			}
			for i := range tc.detect {
				if got.Detect[i] != tc.detect[i] {
					t.Errorf("detect %v, want %v", got.Detect, tc.detect)
				}
			}
		})
	}
}
