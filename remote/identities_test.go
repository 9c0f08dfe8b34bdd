package remote_test

import (
	"context"
	"strings"
	"testing"
	"time"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"

	"github.com/cozystack/computeplane/remote/posture"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/remote"
)

// access is one row of the matrix: may user do verb on resource (in namespace, by name)?
type access struct {
	verb, group, resource, subresource, namespace, name string
	allowed                                             bool
}

// TestIdentitiesMatrix applies the deployer and applier identities to a real apiserver
// and checks, with SubjectAccessReviews, that each may do exactly what the table says.
func TestIdentitiesMatrix(t *testing.T) {
	scheme := testScheme(t)
	plane, err := devenv.StartTenant(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := plane.Client
	for _, ns := range []string{"tenant-a", "notebooks", "other", posture.ApplierNamespace} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, obj := range posture.Identities([]string{"tenant-a"}, []string{"tenant-a", "notebooks"}, false, map[string]string{"app.kubernetes.io/managed-by": "computeplane-operator"}) {
		if err := c.Create(ctx, obj); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("%s %s: %v", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}

	deployer := "system:serviceaccount:tenant-a:" + cpv1.DeployerName
	applier := "system:serviceaccount:" + posture.ApplierNamespace + ":" + posture.ApplierName
	matrix := map[string][]access{
		deployer: {
			{"create", "apps", "deployments", "", "notebooks", "", true},
			{"create", "apps", "deployments", "", "tenant-a", "", true},
			{"patch", "", "services", "", "notebooks", "", true},
			{"create", "", "secrets", "", "notebooks", "", true}, // Helm's release records
			{"get", "", "pods", "log", "notebooks", "", true},
			{"create", "rbac.authorization.k8s.io", "roles", "", "notebooks", "", true},
			{"create", "apps", "deployments", "", "other", "", false},
			{"get", "", "secrets", "", "kube-system", "", false},
			{"create", "", "namespaces", "", "", "", false},
			{"create", "rbac.authorization.k8s.io", "clusterroles", "", "", "", false},
			{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", "", false},
			{"escalate", "rbac.authorization.k8s.io", "roles", "", "notebooks", "", false},
			{"bind", "rbac.authorization.k8s.io", "roles", "", "notebooks", "", false},
			{"impersonate", "", "serviceaccounts", "", "tenant-a", cpv1.DeployerName, false},
			{"impersonate", "", "users", "", "", "admin", false},
			{"create", "", "pods", "exec", "notebooks", "", false},
			{"create", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "", false},
			{"update", "", "resourcequotas", "", "notebooks", "", false},
			{"patch", "", "namespaces", "", "", "notebooks", false},
		},
		applier: {
			{"impersonate", "", "serviceaccounts", "", "tenant-a", cpv1.DeployerName, true},
			{"impersonate", "", "serviceaccounts", "", "tenant-a", "default", false},
			{"impersonate", "", "serviceaccounts", "", "notebooks", cpv1.DeployerName, false},
			{"impersonate", "", "users", "", "", "admin", false},
			{"impersonate", "", "groups", "", "", "system:masters", false},
			{"get", "", "secrets", "", "tenant-a", "", false},
			{"create", "apps", "deployments", "", "notebooks", "", false},
			{"list", "", "namespaces", "", "", "", false},
		},
	}
	// RBAC sees new bindings a moment after they are created: wait for the first grant.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: deployer,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Group: "apps", Resource: "deployments", Namespace: "tenant-a"}}}
		if err := c.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed || time.Now().After(deadline) {
			break
		}
	}
	for user, rows := range matrix {
		ns := strings.Split(user, ":")[2]
		for _, row := range rows {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: row.verb, Group: row.group, Resource: row.resource, Subresource: row.subresource,
					Namespace: row.namespace, Name: row.name,
				},
			}}
			if err := c.Create(ctx, sar); err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != row.allowed {
				t.Errorf("%s %s %s/%s %s in %q (%s): allowed=%v, want %v", user, row.verb, row.resource, row.subresource,
					row.name, row.namespace, row.group, sar.Status.Allowed, row.allowed)
			}
		}
	}

	// The apiserver's escalation check: a deployer cannot write itself a Role with more
	// than it holds (pods/exec here), although it may create Roles.
	cfg := rest.CopyConfig(plane.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: deployer}
	dc, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	wider := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", Name: "wider"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}}}}
	if err := dc.Create(ctx, wider); err == nil || !strings.Contains(err.Error(), "attempting to grant RBAC permissions not currently held") {
		t.Errorf("a deployer wrote itself a wider Role: %v", err)
	}
	narrow := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", Name: "narrow"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
	if err := dc.Create(ctx, narrow); err != nil {
		t.Errorf("a deployer cannot create a chart's own narrow Role: %v", err)
	}
}

func TestDeployerRulesPodExecOnlyWhenAllowed(t *testing.T) {
	has := func(rules []rbacv1.PolicyRule) bool {
		for _, r := range rules {
			for _, res := range r.Resources {
				if res == "pods/exec" {
					return true
				}
			}
		}
		return false
	}
	if has(posture.DeployerRules(false)) || !has(posture.DeployerRules(true)) {
		t.Error("pods/exec must be granted exactly when the class allows it")
	}
	for _, r := range posture.DeployerRules(true) {
		for _, v := range r.Verbs {
			if v == "escalate" || v == "bind" || v == "impersonate" || v == "*" {
				t.Errorf("deployer rule grants %q: %+v", v, r)
			}
		}
	}
}

// TestRevokeApplierKillsCopiedTokens: a token the tenant copied works until revocation,
// then never again (the ServiceAccount it is bound to is gone), whether or not the
// Secret it came in still exists; so does a token requested for the deployer itself;
// objects without the plane's labels are left alone.
func TestRevokeApplierKillsCopiedTokens(t *testing.T) {
	scheme := testScheme(t)
	plane, err := devenv.StartTenant(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := plane.Client
	labels := map[string]string{"computeplane.cozystack.io/uid": "u1"}
	for _, ns := range []string{"tenant-a", posture.ApplierNamespace} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, obj := range posture.Identities([]string{"tenant-a"}, []string{"tenant-a"}, false, labels) {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	token, err := remote.IssueApplierToken(ctx, c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(plane.Config)
	cfg.CertData, cfg.KeyData, cfg.BearerToken = nil, nil, token.Token
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:tenant-a:" + cpv1.DeployerName}
	copied, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	deploy := func() error {
		return copied.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", GenerateName: "x-"}}, client.DryRunAll)
	}
	if err := deploy(); err != nil {
		t.Fatalf("the issued token does not work before revocation: %v", err)
	}
	// A token of the deployer itself (a plane admin may request one).
	deployerSA := &corev1.ServiceAccount{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "tenant-a", Name: cpv1.DeployerName}, deployerSA); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{}
	if err := c.SubResource("token").Create(ctx, deployerSA, tr); err != nil {
		t.Fatal(err)
	}
	dcfg := rest.CopyConfig(plane.Config)
	dcfg.CertData, dcfg.KeyData, dcfg.BearerToken = nil, nil, tr.Status.Token
	asDeployer := kubernetes.NewForConfigOrDie(dcfg)
	deployAsDeployer := func() error {
		_, err := asDeployer.CoreV1().ConfigMaps("tenant-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "x-"}},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := deployAsDeployer(); err != nil {
		t.Fatalf("the deployer's token does not work before revocation: %v", err)
	}

	// Another plane's labels: nothing is removed.
	if removed, err := remote.RevokeApplier(ctx, c, []string{"tenant-a"}, map[string]string{"computeplane.cozystack.io/uid": "u2"}); err != nil || len(removed) != 0 {
		t.Fatalf("revoking for another plane removed %v (err=%v)", removed, err)
	}
	removed, err := remote.RevokeApplier(ctx, c, []string{"tenant-a"}, labels)
	want := "RoleBinding tenant-a/computeplane-applier, ServiceAccount computeplane-system/computeplane-applier, ServiceAccount tenant-a/computeplane-deployer"
	if err != nil || strings.Join(removed, ", ") != want {
		t.Fatalf("removed %v (err=%v), want %s", removed, err, want)
	}
	// Refused at once: the applier may no longer impersonate (the apiserver's RBAC cache
	// follows its RoleBindings within milliseconds), while the token itself still
	// authenticates from the apiserver's token cache for up to 10 s.
	deadline := time.Now().Add(2 * time.Second)
	for err := deploy(); err == nil; err = deploy() {
		if time.Now().After(deadline) {
			t.Fatal("a copied token still writes 2 s after revocation: its impersonation binding was not removed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	deadline = time.Now().Add(30 * time.Second)
	for err := deploy(); err == nil || !strings.Contains(err.Error(), "Unauthorized"); err = deploy() {
		if time.Now().After(deadline) {
			t.Fatalf("a copied token still authenticates after revocation: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A token requested for the deployer itself died with its ServiceAccount.
	deadline = time.Now().Add(30 * time.Second)
	for err := deployAsDeployer(); err == nil || !strings.Contains(err.Error(), "Unauthorized"); err = deployAsDeployer() {
		if time.Now().After(deadline) {
			t.Fatalf("a deployer token still works after revocation: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if again, err := remote.RevokeApplier(ctx, c, []string{"tenant-a"}, labels); err != nil || len(again) != 0 {
		t.Errorf("a second revocation removed %v (err=%v); it must write nothing", again, err)
	}
}
