package devenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// auditPolicy records, at Metadata level, every request of the operator's identity and
// nothing else: the suite's own requests would only hide what the operator needs.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["` + OperatorUser + `"]
  - level: None
`

// Access is one kind of request: the verb on a resource (with its subresource) of an API
// group, as RBAC rules name them.
type Access struct {
	Group, Resource, Verb string
}

func (a Access) String() string {
	g := a.Group
	if g == "" {
		g = "core"
	}
	return fmt.Sprintf("%s %s/%s", a.Verb, g, a.Resource)
}

// AuditedRequests reads the audit log and returns what the operator asked for, and
// which of those the API server refused for want of a right (403, but for a namespace
// being deleted).
func AuditedRequests(path string) (asked, forbidden map[Access]int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	asked, forbidden = map[Access]int{}, map[Access]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Stage     string                    `json:"stage"`
			Verb      string                    `json:"verb"`
			User      struct{ Username string } `json:"user"`
			ObjectRef *struct {
				APIGroup, Resource, Subresource string
			} `json:"objectRef"`
			ResponseStatus *struct {
				Code    int
				Message string
			} `json:"responseStatus"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, nil, err
		}
		// A watch still open when the log is read has only started its response.
		done := ev.Stage == "ResponseComplete" || (ev.Stage == "ResponseStarted" && ev.Verb == "watch")
		if ev.User.Username != OperatorUser || ev.ObjectRef == nil || !done {
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		a := Access{Group: ev.ObjectRef.APIGroup, Resource: res, Verb: ev.Verb}
		asked[a]++
		// A namespace being deleted refuses new objects with 403 too; that is no RBAC
		// verdict.
		if st := ev.ResponseStatus; st != nil && st.Code == 403 && !strings.Contains(st.Message, "being terminated") {
			forbidden[a]++
		}
	}
	return asked, forbidden, sc.Err()
}

// ShippedOperatorRules returns the rules config/default grants the operator: its
// ClusterRole, its leader-election Role and the roles it binds itself to one namespace
// at a time (Secrets, the cluster-autoscaler's objects).
func ShippedOperatorRules(root string) (map[string][]rbacv1.PolicyRule, error) {
	objs, err := Render(root)
	if err != nil {
		return nil, err
	}
	out := map[string][]rbacv1.PolicyRule{}
	for _, u := range objs {
		switch u.GetName() {
		case "computeplane-manager", "computeplane-leader-election", "computeplane-secrets", "computeplane-autoscaler-manager":
		default:
			continue
		}
		if u.GetKind() != "ClusterRole" && u.GetKind() != "Role" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role); err != nil {
			return nil, err
		}
		out[u.GetKind()+" "+u.GetName()] = role.Rules
	}
	return out, nil
}

// Unexercised lists the accesses rules grant (expanded per group, resource and verb;
// resourceNames narrow a rule but are not expanded) that no request in asked used. Some
// rights are checked inside the API server and never appear as a request of their own:
// a server-side apply that creates an object is authorized as create too; an informer's
// watch with initial events stands for its list (the list is what it falls back to on
// an API server without streaming lists); binding a role is checked when a RoleBinding
// naming it is created or updated.
func Unexercised(rules []rbacv1.PolicyRule, asked map[Access]int) []string {
	used := func(a Access) bool {
		if asked[a] > 0 {
			return true
		}
		switch a.Verb {
		case "create":
			return asked[Access{a.Group, a.Resource, "patch"}] > 0
		case "list":
			return asked[Access{a.Group, a.Resource, "watch"}] > 0
		case "bind":
			for _, v := range []string{"create", "update"} {
				if asked[Access{a.Group, strings.TrimSuffix(a.Resource, "clusterroles") + "rolebindings", v}] > 0 {
					return true
				}
			}
		}
		return false
	}
	var out []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if a := (Access{Group: g, Resource: res, Verb: v}); !used(a) {
						out = append(out, a.String())
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// writeAuditPolicy writes an audit policy into dir and returns the apiserver flags that
// log what it selects to dir/audit.log.
func writeAuditPolicy(dir, content string) (map[string]string, string, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(content), 0o600); err != nil {
		return nil, "", err
	}
	log := filepath.Join(dir, "audit.log")
	return map[string]string{
		"audit-policy-file": policy,
		"audit-log-path":    log,
		"audit-log-format":  "json",
		"audit-log-mode":    "blocking",
	}, log, nil
}

// takenPerNamespace are the rights the operator holds in no namespace until it binds
// their role there itself: its first such request in a namespace is refused by design
// (Secrets; a plane's cluster-autoscaler's Deployment, ServiceAccount and RoleBinding,
// whose other verbs the operator holds cluster-wide). Verbs nil: all.
var takenPerNamespace = map[[2]string][]string{
	{"", "secrets"}:                               nil,
	{"apps", "deployments"}:                       nil,
	{"", "serviceaccounts"}:                       nil,
	{"rbac.authorization.k8s.io", "rolebindings"}: {"patch"},
}

// Refused returns, from the audit log, the operator's requests the API server refused
// for want of a right, but for those taken per namespace (takenPerNamespace): each is a
// right the controllers use that the shipped RBAC does not grant.
func Refused(path string) ([]string, map[Access]int, error) {
	asked, forbidden, err := AuditedRequests(path)
	if err != nil {
		return nil, nil, err
	}
	var out []string
	for a, n := range forbidden {
		if verbs, ok := takenPerNamespace[[2]string{a.Group, a.Resource}]; ok && (verbs == nil || slices.Contains(verbs, a.Verb)) {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%d times)", a, n))
	}
	sort.Strings(out)
	return out, asked, nil
}
