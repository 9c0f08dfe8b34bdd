package controllers_test

import (
	"flag"
	"fmt"
	"os"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"

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
// config/default ships. Every request but those the operator takes rights for one
// namespace at a time (Secrets, the cluster-autoscaler's objects: refused by design until
// it binds their role there) must have been allowed: a refusal is a right the
// controllers use and the markers do not grant. Every granted right must have been used
// by some scenario: one that is not is more than the operator needs. And what the
// operator holds cluster-wide writes no workload nor ServiceAccount: a Deployment
// creator runs anything as any ServiceAccount of its namespace.
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
	for _, w := range clusterWideWorkloadWrites(roles["ClusterRole computeplane-manager"]) {
		fmt.Fprintf(os.Stderr, "RBAC audit: the operator may %s cluster-wide; it must take that right per infrastructure namespace\n", w)
		ok = false
	}
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		// Only some scenarios ran: that a right went unused says nothing.
		return ok
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
		fmt.Fprintf(os.Stderr, "RBAC audit: %d kinds of request, all allowed; every shipped right used; no cluster-wide workload or ServiceAccount write\n", len(asked))
	}
	return ok
}

// clusterWideWorkloadWrites lists the writes rules grant on what runs a pod, or names
// the identity a pod runs as.
func clusterWideWorkloadWrites(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, rule := range rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					if v == "get" || v == "list" || v == "watch" {
						continue
					}
					if g == "*" || res == "*" || (g == "" && (res == "pods" || res == "serviceaccounts" || res == "replicationcontrollers")) ||
						(g == "apps" && res != "controllerrevisions") || g == "batch" {
						out = append(out, fmt.Sprintf("%s %s/%s", v, g, res))
					}
				}
			}
		}
	}
	return out
}
