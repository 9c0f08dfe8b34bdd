package controllers_test

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/cozystack/computeplane/internal/devenv"
)

// exercisedElsewhere are rights the shipped RBAC grants that this suite's scenarios do
// not reach, each with the scenario that needs it. Keep it short: a right here is one no
// test here proves necessary.
var exercisedElsewhere = map[string]string{
	"patch core/events": "client-go's event recorder patches an Event that repeats (its count); the leader " +
		"election's Events on the Lease rarely repeat within a suite",
	"update computeplane.cozystack.io/computeplanes/finalizers": "checked inside the API server, with no request " +
		"of its own, by OwnerReferencesPermissionEnforcement (enabled on the suite's API server) each time the " +
		"operator sets blockOwnerDeletion on an object a ComputePlane owns: without it the suite's planes never " +
		"issue their applier Secret",
}

// rbacMatchesUse compares, after the suite, what the operator asked the management
// apiserver for (its audit log: every request of its ServiceAccount) with the RBAC
// config/default ships. Every request but the Secret ones (refused by design until the
// operator binds its Secret role in a namespace) must have been allowed: a refusal is a
// right the controllers use and the markers do not grant. Every granted right must have
// been used by some scenario: one that is not is more than the operator needs.
func rbacMatchesUse() bool {
	refused, asked, err := devenv.Refused(mgmt.AuditLog)
	if err != nil {
		fmt.Fprintln(os.Stderr, "RBAC audit:", err)
		return false
	}
	ok := true
	for _, r := range refused {
		fmt.Fprintf(os.Stderr, "RBAC audit: the operator was refused %s: a right the controllers use is missing from the markers\n", r)
		ok = false
	}
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		// Only some scenarios ran: that a right went unused says nothing.
		return ok
	}
	root, err := devenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "RBAC audit:", err)
		return false
	}
	roles, err := devenv.ShippedOperatorRules(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "RBAC audit:", err)
		return false
	}
	for role, rules := range roles {
		var unused []string
		for _, a := range devenv.Unexercised(rules, asked) {
			if _, ok := exercisedElsewhere[a]; !ok {
				unused = append(unused, a)
			}
		}
		if len(unused) > 0 {
			fmt.Fprintf(os.Stderr, "RBAC audit: %s grants what no scenario used:\n  %s\n", role, strings.Join(unused, "\n  "))
			ok = false
		}
	}
	if ok {
		fmt.Fprintf(os.Stderr, "RBAC audit: %d kinds of request, all allowed; every shipped right used\n", len(asked))
	}
	return ok
}
