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
	var deployment, policy, binding *unstructured.Unstructured
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatal(err)
		}
		switch u.GetKind() {
		case "Deployment":
			deployment = u
		case "ValidatingAdmissionPolicy":
			policy = u
		case "ValidatingAdmissionPolicyBinding":
			binding = u
		}
	}
	if deployment == nil || policy == nil || binding == nil {
		t.Fatalf("config/default lacks the manager, the finalizer guard or its binding")
	}
	sa, _, _ := unstructured.NestedString(deployment.Object, "spec", "template", "spec", "serviceAccountName")
	user := "system:serviceaccount:" + deployment.GetNamespace() + ":" + sa
	if user != testenv.OperatorUser {
		t.Errorf("the operator installs as %s; the tests run it as %s", user, testenv.OperatorUser)
	}
	conds, _, _ := unstructured.NestedSlice(policy.Object, "spec", "matchConditions")
	if len(conds) != 1 || !strings.Contains(conds[0].(map[string]any)["expression"].(string), "'"+user+"'") {
		t.Errorf("the finalizer guard does not let exactly %s through: %v", user, conds)
	}
	if name, _, _ := unstructured.NestedString(binding.Object, "spec", "policyName"); name != policy.GetName() {
		t.Errorf("the binding points at %q, the policy is %q", name, policy.GetName())
	}
}
