package testenv_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/computeplane/test/testenv"
)

// TestShippedPoliciesNameTheOperator renders config/default as users install it and
// checks that the finalizer guard lets through exactly the operator's ServiceAccount
// there (the tests run the operator under testenv.OperatorUser, which must be that
// name), and that its binding points at it after kustomize's renames.
func TestShippedPoliciesNameTheOperator(t *testing.T) {
	root, err := testenv.RepoRoot()
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
	if deployment == nil || len(policies) != 3 || len(bindings) != 3 {
		t.Fatalf("config/default lacks the manager, or the finalizer, placement and abandon guards and their bindings")
	}
	sa, _, _ := unstructured.NestedString(deployment.Object, "spec", "template", "spec", "serviceAccountName")
	user := "system:serviceaccount:" + deployment.GetNamespace() + ":" + sa
	if user != testenv.OperatorUser {
		t.Errorf("the operator installs as %s; the tests run it as %s", user, testenv.OperatorUser)
	}
	for _, name := range []string{"computeplane-finalizer-guard", "computeplane-placement-guard"} {
		policy := policies[name]
		if policy == nil {
			t.Errorf("config/default does not install %s", name)
			continue
		}
		conds, _, _ := unstructured.NestedSlice(policy.Object, "spec", "matchConditions")
		found := false
		for _, c := range conds {
			if c.(map[string]any)["name"] == "not-the-operator" && strings.Contains(c.(map[string]any)["expression"].(string), "'"+user+"'") {
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
