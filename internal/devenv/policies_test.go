package devenv_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cozystack/computeplane/controllers/computeplane"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
)

// TestShippedPoliciesNameTheOperator renders config/default as users install it and
// checks that the finalizer guard lets through exactly the operator's ServiceAccount
// there (the tests run the operator under devenv.OperatorUser, which must be that
// name), and that its binding points at it after kustomize's renames.
func TestShippedPoliciesNameTheOperator(t *testing.T) {
	root, err := devenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(root, "config", "default")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v", err)
	}
	var deployment *unstructured.Unstructured
	policies, bindings := map[string]*unstructured.Unstructured{}, map[string]*unstructured.Unstructured{}
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatal(err)
		}
		switch u.GetKind() {
		case "Deployment":
			deployment = u
		case "ValidatingAdmissionPolicy":
			policies[u.GetName()] = u
		case "ValidatingAdmissionPolicyBinding":
			bindings[u.GetName()] = u
		}
	}
	if deployment == nil {
		t.Fatal("config/default lacks the manager")
	}
	for _, name := range []string{"computeplane-finalizer-guard", "computeplane-placement-guard", "computeplane-placement-status-guard",
		"computeplane-abandon-guard", "computeplane-shard-guard", "computeplane-service-access-guard", "computeplane-namespace-guard", "computeplane-uninstall-guard", "computeplane-owner-guard"} {
		if policies[name] == nil || bindings[name] == nil {
			t.Errorf("config/default does not install %s and its binding", name)
		}
	}
	sa, _, _ := unstructured.NestedString(deployment.Object, "spec", "template", "spec", "serviceAccountName")
	user := "system:serviceaccount:" + deployment.GetNamespace() + ":" + sa
	if user != devenv.OperatorUser {
		t.Errorf("the operator installs as %s; the tests run it as %s", user, devenv.OperatorUser)
	}
	for _, name := range []string{"computeplane-finalizer-guard", "computeplane-placement-guard", "computeplane-namespace-guard"} {
		policy := policies[name]
		if policy == nil {
			t.Errorf("config/default does not install %s", name)
			continue
		}
		conds, _, _ := unstructured.NestedSlice(policy.Object, "spec", "matchConditions")
		found := false
		for _, c := range conds {
			name := c.(map[string]any)["name"]
			if (name == "not-the-operator" || name == "the-operator") && strings.Contains(c.(map[string]any)["expression"].(string), "'"+user+"'") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s does not let exactly %s through: %v", name, user, conds)
		}
	}
	for name, binding := range bindings {
		if ref, _, _ := unstructured.NestedString(binding.Object, "spec", "policyName"); policies[ref] == nil {
			t.Errorf("binding %s points at %q, which config/default does not install", name, ref)
		}
	}
}

// TestShippedRBACHoldsNoClusterWideSecrets: config/default binds the operator no
// cluster-wide right on Secrets; the role it binds itself per namespace is shipped under
// the name its `bind` right names.
func TestShippedRBACHoldsNoClusterWideSecrets(t *testing.T) {
	root, err := devenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := devenv.Render(root)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]*rbacv1.ClusterRole{}
	var bindings []*rbacv1.ClusterRoleBinding
	for _, u := range objs {
		switch u.GetKind() {
		case "ClusterRole":
			r := &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, r); err != nil {
				t.Fatal(err)
			}
			roles[r.Name] = r
		case "ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b); err != nil {
				t.Fatal(err)
			}
			bindings = append(bindings, b)
		}
	}
	bound := 0
	for _, b := range bindings {
		for _, s := range b.Subjects {
			if "system:serviceaccount:"+s.Namespace+":"+s.Name != devenv.OperatorUser {
				continue
			}
			bound++
			role := roles[b.RoleRef.Name]
			if role == nil {
				t.Fatalf("%s binds %s, which config/default does not ship", b.Name, b.RoleRef.Name)
			}
			bindable := []string{computeplane.SecretsRole, computeplane.AutoscalerManagerRole, render.AutoscalerClusterRole}
			for _, rule := range role.Rules {
				if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*") {
					t.Errorf("ClusterRole %s gives the operator Secrets cluster-wide: %+v", role.Name, rule)
				}
				// A Deployment (or pod) creator runs anything as any ServiceAccount of its
				// namespace: the operator takes such rights one infrastructure namespace
				// at a time (computeplane.AutoscalerManagerRole), never cluster-wide.
				for _, res := range []string{"deployments", "serviceaccounts", "pods", "replicasets", "daemonsets", "statefulsets", "jobs", "cronjobs"} {
					if slices.Contains(rule.Resources, res) && slices.ContainsFunc(rule.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" }) {
						t.Errorf("ClusterRole %s lets the operator write %s cluster-wide: %+v", role.Name, res, rule)
					}
				}
				if slices.Contains(rule.Verbs, "bind") && (len(rule.ResourceNames) == 0 ||
					slices.ContainsFunc(rule.ResourceNames, func(n string) bool { return !slices.Contains(bindable, n) })) {
					t.Errorf("ClusterRole %s lets the operator bind more than %v: %+v", role.Name, bindable, rule)
				}
			}
		}
	}
	if bound == 0 {
		t.Fatal("config/default binds the operator no ClusterRole")
	}
	// The autoscaler's role, which the operator binds in infrastructure namespaces: no
	// Secret, no wildcard, nothing created or deleted.
	autoscaler := roles[render.AutoscalerClusterRole]
	if autoscaler == nil {
		t.Errorf("config/default ships no %s role", render.AutoscalerClusterRole)
	} else {
		for _, rule := range autoscaler.Rules {
			if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.Verbs, "*") ||
				slices.Contains(rule.Verbs, "create") || slices.Contains(rule.Verbs, "delete") || slices.Contains(rule.Verbs, "bind") ||
				slices.Contains(rule.Verbs, "escalate") || slices.Contains(rule.Verbs, "impersonate") {
				t.Errorf("ClusterRole %s grants more than the autoscaler uses: %+v", autoscaler.Name, rule)
			}
		}
	}
	// The operator's rights on the autoscaler, bound in infrastructure namespaces only:
	// no Secret, no wildcard, no RBAC but the autoscaler's binding.
	manager := roles[computeplane.AutoscalerManagerRole]
	if manager == nil {
		t.Errorf("config/default ships no %s role", computeplane.AutoscalerManagerRole)
	} else {
		for _, rule := range manager.Rules {
			if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.Verbs, "*") ||
				slices.Contains(rule.Verbs, "bind") || slices.Contains(rule.Verbs, "escalate") || slices.Contains(rule.Verbs, "impersonate") ||
				slices.Contains(rule.Resources, "roles") || slices.Contains(rule.Resources, "clusterroles") || slices.Contains(rule.Resources, "clusterrolebindings") {
				t.Errorf("ClusterRole %s grants more than the operator's autoscaler needs: %+v", manager.Name, rule)
			}
		}
	}
	secrets := roles[computeplane.SecretsRole]
	if secrets == nil || len(secrets.Rules) != 1 || !slices.Equal(secrets.Rules[0].Resources, []string{"secrets"}) {
		t.Errorf("config/default ships no %s role of Secret rights alone: %+v", computeplane.SecretsRole, secrets)
	}
}
