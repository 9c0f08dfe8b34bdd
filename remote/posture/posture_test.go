package posture

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func testPosture() Posture {
	return Posture{
		Level: "restricted", Version: "v1.33", Exempt: []string{"kube-system"}, Operator: "kubernetes-super-admin",
		Trusted:             []string{"system:serviceaccount:cert-manager:cert-manager-cainjector"},
		PlacementNamespaces: []string{"tenant-a", "notebooks"},
		Quota:               corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")},
		Labels:              map[string]string{"computeplane.cozystack.io/name": "p"},
	}
}

func TestNamespaceLabels(t *testing.T) {
	p := testPosture()
	for ns, want := range map[string]string{"default": "restricted", "tenant-a": "restricted", "kube-system": "privileged"} {
		l := p.NamespaceLabels(ns)
		if l[cpv1.PodSecurityEnforceLabel] != want || l[cpv1.PodSecurityEnforceVersionLabel] != "v1.33" || l[cpv1.PodSecurityAuditLabel] != "restricted" || l[cpv1.PodSecurityWarnLabel] != "restricted" {
			t.Errorf("%s: labels = %v, want enforce %s", ns, l, want)
		}
	}
}

func TestPlacementObjects(t *testing.T) {
	objs := testPosture().PlacementObjects()
	var got []string
	for _, o := range objs {
		got = append(got, o.GetObjectKind().GroupVersionKind().Kind+" "+o.GetNamespace()+"/"+o.GetName())
	}
	want := "Namespace /computeplane-system,ServiceAccount computeplane-system/computeplane-canary,ServiceAccount computeplane-system/computeplane-deployer," +
		"Namespace /notebooks,ResourceQuota notebooks/computeplane,Namespace /tenant-a,ResourceQuota tenant-a/computeplane"
	if strings.Join(got, ",") != want {
		t.Errorf("objects = %v, want %s (no LimitRange when the class sets none)", got, want)
	}
	for _, o := range objs {
		// The canaries' ServiceAccounts hold no token a pod could use.
		if sa, ok := o.(*corev1.ServiceAccount); ok && (sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken) {
			t.Errorf("ServiceAccount %s mounts its token by default", sa.Name)
		}
	}
	ns := objs[3].(*corev1.Namespace)
	if ns.Labels[cpv1.PlacementNamespaceLabel] != "true" || ns.Labels["computeplane.cozystack.io/name"] != "p" || ns.Labels[cpv1.PodSecurityEnforceLabel] != "restricted" {
		t.Errorf("placement namespace labels = %v", ns.Labels)
	}
}

func TestPolicies(t *testing.T) {
	objs := testPosture().Policies()
	if len(objs) != 2*len(PolicyNames()) {
		t.Fatalf("%d objects for %d policies", len(objs), len(PolicyNames()))
	}
	for i, name := range PolicyNames() {
		vap := objs[2*i].(*admissionv1.ValidatingAdmissionPolicy)
		b := objs[2*i+1].(*admissionv1.ValidatingAdmissionPolicyBinding)
		if vap.Name != name || b.Name != name || b.Spec.PolicyName != name {
			t.Errorf("policy %d: %s / binding %s -> %s", i, vap.Name, b.Name, b.Spec.PolicyName)
		}
		if vap.Annotations[cpv1.ReasonAnnotation] == "" {
			t.Errorf("%s has no documented reason", name)
		}
		if len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionv1.Deny {
			t.Errorf("%s binding actions = %v", name, b.Spec.ValidationActions)
		}
		for _, mc := range vap.Spec.MatchConditions {
			if !strings.HasPrefix(mc.Expression, "!(request.userInfo.username in ['kubernetes-super-admin', 'system:serviceaccount:cert-manager:cert-manager-cainjector'])") ||
				strings.Contains(mc.Expression, "kube-system']") || strings.Contains(mc.Expression, "startsWith") {
				t.Errorf("%s match condition does not exempt exactly the operator and the trusted add-on identities, by name: %s", name, mc.Expression)
			}
		}
	}
	hardening := objs[2].(*admissionv1.ValidatingAdmissionPolicy)
	if sel := hardening.Spec.MatchConstraints.NamespaceSelector; sel == nil || sel.MatchExpressions[0].Values[0] != "kube-system" {
		t.Errorf("pod hardening does not skip the exempt namespaces: %+v", sel)
	}
	if len(hardening.Spec.MatchConditions) != 0 {
		t.Error("pod hardening exempts an identity; it must hold for everyone, the operator included")
	}
}

// TestDeployerCredentialsHoldForEveryone: pods are created by controllers (a
// Deployment's by the ReplicaSet controller, an exempt namespace's ServiceAccount), so
// the policy refusing pods and tokens of the deployer exempts no identity and no
// namespace.
func TestDeployerCredentialsHoldForEveryone(t *testing.T) {
	var vap *admissionv1.ValidatingAdmissionPolicy
	for _, o := range testPosture().Policies() {
		if v, ok := o.(*admissionv1.ValidatingAdmissionPolicy); ok && v.Name == "computeplane-deployer-credentials" {
			vap = v
		}
	}
	if vap == nil {
		t.Fatal("no computeplane-deployer-credentials policy")
	}
	mc := vap.Spec.MatchConstraints
	if len(vap.Spec.MatchConditions) != 0 || len(mc.NamespaceSelector.MatchExpressions)+len(mc.NamespaceSelector.MatchLabels) != 0 ||
		len(mc.ObjectSelector.MatchExpressions)+len(mc.ObjectSelector.MatchLabels) != 0 {
		t.Errorf("the deployer-credentials policy exempts someone or somewhere: %+v %+v", vap.Spec.MatchConditions, mc)
	}
	var ops []string
	for _, r := range mc.ResourceRules {
		for _, op := range r.Operations {
			ops = append(ops, strings.Join(r.Resources, ",")+":"+string(op))
		}
	}
	if got := strings.Join(ops, " "); got != "pods:CREATE secrets:CREATE secrets:UPDATE" {
		t.Errorf("the deployer-credentials policy covers %s", got)
	}
}

func TestNamesNotDeployer(t *testing.T) {
	for _, tc := range []struct {
		fields []string
		want   string
	}{
		{[]string{"serviceAccountName"}, "!(has(object.spec.serviceAccountName) && object.spec.serviceAccountName == 'computeplane-deployer')"},
		{[]string{"serviceAccountName", "serviceAccount"}, "!(has(object.spec.serviceAccountName) && object.spec.serviceAccountName == 'computeplane-deployer') && " +
			"!(has(object.spec.serviceAccount) && object.spec.serviceAccount == 'computeplane-deployer')"},
	} {
		if got := namesNotDeployer("object.spec", tc.fields...); got != tc.want {
			t.Errorf("namesNotDeployer(%v) = %s, want %s", tc.fields, got, tc.want)
		}
	}
}

// TestEveryPolicyHasItsCanary: the gate opens only once each policy refused its
// canary's request, so every policy carries one, with a name.
func TestEveryPolicyHasItsCanary(t *testing.T) {
	labels := map[string]string{"computeplane.cozystack.io/name": "p"}
	for _, pol := range (Posture{Labels: labels}).policies() {
		if pol.canary == nil {
			t.Errorf("policy %s has no canary: the gate would open without proof it is in force", pol.name)
			continue
		}
		obj := pol.canary(labels)
		if obj.GetName() == "" {
			t.Errorf("the canary of %s has no name", pol.name)
		}
	}
}

func TestQuoteEscapes(t *testing.T) {
	if got := quote("it's"); got != `'it\'s'` {
		t.Errorf("quote = %s", got)
	}
	if got := list(nil); got != "[]" {
		t.Errorf("list(nil) = %s", got)
	}
}

func TestWithoutClaimed(t *testing.T) {
	ns := func(name string, placement bool) corev1.Namespace {
		n := corev1.Namespace{}
		n.Name = name
		if placement {
			n.Labels = map[string]string{cpv1.PlacementNamespaceLabel: "true"}
		}
		return n
	}
	p := Posture{Exempt: []string{"kube-system", "notebooks", "cilium"}}
	cases := []struct {
		name            string
		live            []corev1.Namespace
		exempt, dropped []string
	}{
		{"nothing claimed", []corev1.Namespace{ns("kube-system", false), ns("notebooks", false)}, p.Exempt, nil},
		{"a former placement namespace exempted", []corev1.Namespace{ns("kube-system", false), ns("notebooks", true)}, []string{"kube-system", "cilium"}, []string{"notebooks"}},
		{"a placement namespace the class does not exempt", []corev1.Namespace{ns("tools", true)}, p.Exempt, nil},
		{"an exempt namespace not there yet", nil, p.Exempt, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, dropped := p.WithoutClaimed(c.live)
			if !slices.Equal(got.Exempt, c.exempt) || !slices.Equal(dropped, c.dropped) {
				t.Errorf("exempt %v dropped %v, want %v and %v", got.Exempt, dropped, c.exempt, c.dropped)
			}
			if slices.Contains(c.dropped, "notebooks") && got.IsExempt("notebooks") {
				t.Errorf("a claimed namespace is still exempt")
			}
		})
	}
	if len(p.Exempt) != 3 {
		t.Errorf("the posture's own list was changed: %v", p.Exempt)
	}
}

// TestDeployerWritable: every resource a deployer may create is swept after an
// uninstall, at a served version; what it may only read, and subresources, are not.
func TestDeployerWritable(t *testing.T) {
	got := map[string]bool{}
	for _, gvr := range DeployerWritable() {
		got[gvr.String()] = true
	}
	for _, want := range []string{"/v1, Resource=configmaps", "/v1, Resource=secrets", "apps/v1, Resource=deployments",
		"batch/v1, Resource=jobs", "autoscaling/v2, Resource=horizontalpodautoscalers", "rbac.authorization.k8s.io/v1, Resource=rolebindings"} {
		if !got[want] {
			t.Errorf("%s is not swept", want)
		}
	}
	for _, not := range []string{"/v1, Resource=endpoints", "/v1, Resource=pods/log", "discovery.k8s.io/v1, Resource=endpointslices"} {
		if got[not] {
			t.Errorf("%s is swept, but no deployer may create it", not)
		}
	}
	if n := len(got); n != 18 {
		t.Errorf("%d resources swept, want the 18 a deployer may create", n)
	}
}

// TestBoundedQuota: every kind a deployer may create is counted, the class's own
// bounds win, and what the class names beyond them is kept.
func TestBoundedQuota(t *testing.T) {
	q := BoundedQuota(corev1.ResourceList{"count/configmaps": resource.MustParse("7"), corev1.ResourcePods: resource.MustParse("10")})
	for _, gvr := range DeployerWritable() {
		name := "count/" + gvr.Resource
		if gvr.Group != "" {
			name += "." + gvr.Group
		}
		if _, ok := q[corev1.ResourceName(name)]; !ok {
			t.Errorf("%s is not bounded", name)
		}
	}
	for name, want := range map[corev1.ResourceName]string{
		"count/configmaps": "7", corev1.ResourcePods: "10", "count/secrets": "250", "count/deployments.apps": "50",
		corev1.ResourceRequestsStorage: "200Gi", corev1.ResourceServicesNodePorts: "0", corev1.ResourceServicesLoadBalancers: "0",
	} {
		got, ok := q[name]
		if !ok || got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("%s = %v (set %v), want %s", name, got.String(), ok, want)
		}
	}
}
