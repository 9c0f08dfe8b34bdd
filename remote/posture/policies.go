package posture

import (
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// Policies are the plane's ValidatingAdmissionPolicies and their bindings: native
// admission, so there is no webhook server in the plane to keep alive.
func (p Posture) Policies() []client.Object {
	var out []client.Object
	for _, pol := range p.policies() {
		out = append(out, pol.objects(p.Labels)...)
	}
	return out
}

// PolicyNames are the names of the operator's policies (and of their bindings).
func PolicyNames() []string {
	var names []string
	for _, pol := range (Posture{}).policies() {
		names = append(names, policyPrefix+pol.name)
	}
	return names
}

// policies is the plane's posture, one policy each: what it refuses, to whom, its reason
// and its canary.
func (p Posture) policies() []policy {
	return []policy{
		p.podSecurityLabelsPolicy(),
		p.podHardeningPolicy(),
		p.serviceExposurePolicy(),
		p.admissionGuardPolicy(),
		p.crdConversionWebhooksPolicy(),
		p.serviceAccountTokensPolicy(),
		p.operatorObjectsPolicy(),
		p.rolebindingSubjectsPolicy(),
		p.deployerCredentialsPolicy(),
	}
}

// notOperator matches every request but the operator's and those of the add-ons'
// ServiceAccounts the class names as trusted (cert-manager's CA injector, say), by exact
// user name: a ServiceAccount is trusted for what it is, not for where it runs (any pod
// of an exempt namespace, a compromised add-on's included, would be the operator).
func (p Posture) notOperator() admissionv1.MatchCondition {
	return admissionv1.MatchCondition{
		Name:       "not-the-operator",
		Expression: fmt.Sprintf("!(request.userInfo.username in %s)", list(append([]string{p.Operator}, p.Trusted...))),
	}
}

// notExempt selects every namespace but the exempt ones.
func (p Posture) notExempt() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: nonEmpty(p.Exempt),
	}}}
}

func (p Posture) podSecurityLabelsPolicy() policy {
	return policy{
		name:   "pod-security-labels",
		canary: canaryPSANamespace,
		reason: "Only the operator may set or change a namespace's Pod Security enforcement: relabelling a namespace privileged would undo the plane's hardening.",
		rules:  rules([]string{""}, []string{"namespaces"}, admissionv1.Create, admissionv1.Update),
		match:  []admissionv1.MatchCondition{p.notOperator()},
		validations: []admissionv1.Validation{
			{
				Expression: fmt.Sprintf("request.operation != 'UPDATE' || %s.all(k, !has(oldObject.metadata.labels) || !(k in oldObject.metadata.labels) || (has(object.metadata.labels) && k in object.metadata.labels && object.metadata.labels[k] == oldObject.metadata.labels[k]))", list([]string{cpv1.PodSecurityEnforceLabel, cpv1.PodSecurityEnforceVersionLabel})),
				Message:    "the Pod Security labels of a ComputePlane namespace are owned by the operator and cannot be removed or changed",
			},
			{
				Expression: fmt.Sprintf("request.operation != 'CREATE' || !has(object.metadata.labels) || %s.all(k, !(k in object.metadata.labels))", list([]string{cpv1.PodSecurityEnforceLabel, cpv1.PodSecurityEnforceVersionLabel})),
				Message:    "Pod Security labels on new namespaces are set by the operator; create the namespace without them",
			},
		},
	}
}

func (p Posture) podHardeningPolicy() policy {
	return policy{
		name:   "pod-hardening",
		canary: canaryHostNetworkPod, alsoEnforcedBy: "violates PodSecurity",
		reason: "Host namespaces, host ports, hostPath volumes, privileged containers and added capabilities break the isolation untrusted code runs under; they are refused even in a namespace that lost its Pod Security label by mistake, and in ephemeral (debug) containers too.",
		rules:  rules([]string{""}, []string{"pods", "pods/ephemeralcontainers"}, admissionv1.Create, admissionv1.Update),
		ns:     p.notExempt(),
		validations: []admissionv1.Validation{
			{Expression: "!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && !(has(object.spec.hostPID) && object.spec.hostPID) && !(has(object.spec.hostIPC) && object.spec.hostIPC)",
				Message: "host namespaces (hostNetwork, hostPID, hostIPC) are not allowed in a ComputePlane"},
			{Expression: "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))",
				Message: "hostPath volumes are not allowed in a ComputePlane"},
			{Expression: containersAll("!has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged"),
				Message: "privileged containers are not allowed in a ComputePlane"},
			{Expression: containersAll("!has(c.securityContext) || !has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || size(c.securityContext.capabilities.add) == 0"),
				Message: "adding Linux capabilities is not allowed in a ComputePlane"},
			{Expression: containersAll("!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)"),
				Message: "host ports are not allowed in a ComputePlane"},
		},
	}
}

func (p Posture) serviceExposurePolicy() policy {
	return policy{
		name:   "service-exposure",
		canary: canaryNodePortService,
		reason: "NodePort and LoadBalancer Services would expose tenant workloads outside the plane, and externalIPs let a Service capture traffic meant for any address (CVE-2020-8554); only the operator's add-ons may use them.",
		rules:  rules([]string{""}, []string{"services"}, admissionv1.Create, admissionv1.Update),
		match:  []admissionv1.MatchCondition{p.notOperator()},
		validations: []admissionv1.Validation{
			{
				Expression: "!has(object.spec.type) || !(object.spec.type in ['NodePort', 'LoadBalancer'])",
				Message:    "NodePort and LoadBalancer Services are not allowed in a ComputePlane",
			},
			{
				Expression: "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
				Message:    "Services with externalIPs are not allowed in a ComputePlane (CVE-2020-8554)",
			},
		},
	}
}

func (p Posture) admissionGuardPolicy() policy {
	return policy{
		name:   "admission-guard",
		canary: canaryWebhook,
		// Kubernetes never runs admission policies on admission policies and their
		// bindings (validating or mutating), so nothing can lock the cluster out; a
		// change to those is caught as drift instead, and a mutating policy the
		// operator did not create keeps the gate closed.
		reason: "Admission webhooks decide what the plane accepts (and can rewrite it), and an APIService hands a whole API group to a Service; only the operator may add, change or remove them.",
		rules: append(rules([]string{"admissionregistration.k8s.io"}, []string{
			"validatingwebhookconfigurations", "mutatingwebhookconfigurations",
		}, admissionv1.Create, admissionv1.Update, admissionv1.Delete),
			rules([]string{"apiregistration.k8s.io"}, []string{"apiservices"}, admissionv1.Create, admissionv1.Update, admissionv1.Delete)...),
		match: []admissionv1.MatchCondition{p.notOperator()},
		validations: []admissionv1.Validation{{
			Expression: "false",
			Message:    "admission configuration and API registration of a ComputePlane are owned by the operator",
		}},
	}
}

func (p Posture) crdConversionWebhooksPolicy() policy {
	return policy{
		name:   "crd-conversion-webhooks",
		canary: canaryConversionCRD,
		reason: "A conversion webhook receives (and may rewrite) every object of its CustomResourceDefinition; only the operator may configure one.",
		rules:  rules([]string{"apiextensions.k8s.io"}, []string{"customresourcedefinitions"}, admissionv1.Create, admissionv1.Update),
		match:  []admissionv1.MatchCondition{p.notOperator()},
		validations: []admissionv1.Validation{{
			Expression: "!has(object.spec.conversion) || !has(object.spec.conversion.strategy) || object.spec.conversion.strategy != 'Webhook'",
			Message:    "CustomResourceDefinitions with a conversion webhook are not allowed in a ComputePlane",
		}},
	}
}

func (p Posture) serviceAccountTokensPolicy() policy {
	return policy{
		name:   "service-account-tokens",
		canary: canaryTokenSecret,
		reason: "A kubernetes.io/service-account-token Secret holds a token that never expires and survives revocation of the short-lived credentials; the plane's workloads get projected, expiring tokens instead.",
		rules:  rules([]string{""}, []string{"secrets"}, admissionv1.Create, admissionv1.Update),
		match:  []admissionv1.MatchCondition{p.notOperator()},
		validations: []admissionv1.Validation{{
			Expression: "!has(object.type) || object.type != 'kubernetes.io/service-account-token'",
			Message:    "ServiceAccount token Secrets (non-expiring tokens) are not allowed in a ComputePlane; use projected ServiceAccount tokens",
		}},
	}
}

func (p Posture) operatorObjectsPolicy() policy {
	return policy{
		name:   "operator-objects",
		canary: canaryForgedServiceAccount,
		// With this in force, only an identity the operator trusts can change what the
		// operator created in the plane's namespaces, so those kinds need no watch of
		// their own: the policy and its binding are watched, and a full read every
		// resync interval still compares everything.
		reason: "The deployers' ServiceAccounts, Roles and RoleBindings, the applier's, and each placement namespace's quota and limit range are the operator's: a chart (or anything running as a deployer) that deleted, edited or forged one could widen a deployer's reach or take the plane's gate down; only the operator may change them (and Kubernetes' namespace controller and garbage collector delete them with their namespace).",
		rules: append(rules([]string{""}, []string{"serviceaccounts", "resourcequotas", "limitranges"}, admissionv1.Create, admissionv1.Update, admissionv1.Delete),
			rules([]string{"rbac.authorization.k8s.io"}, []string{"roles", "rolebindings"}, admissionv1.Create, admissionv1.Update, admissionv1.Delete)...),
		selector: p.ownedSelector(),
		match: []admissionv1.MatchCondition{{
			Name: "not-the-operator",
			Expression: p.notOperator().Expression + fmt.Sprintf(" && !(request.operation == 'DELETE' && request.userInfo.username in %s)",
				list(namespaceDeleters)),
		}},
		validations: []admissionv1.Validation{{
			Expression: "false",
			Message:    "this object was created by the ComputePlane operator (it carries the plane's labels) and only the operator may create, change or delete it",
		}},
	}
}

func (p Posture) rolebindingSubjectsPolicy() policy {
	return policy{
		name:   "rolebinding-subjects",
		canary: canaryUnauthenticatedBinding,
		reason: "A deployer may grant what it holds to the ServiceAccounts of its own namespace (a chart's workloads), never to users, groups (system:unauthenticated, system:serviceaccounts) or ServiceAccounts of other namespaces.",
		rules:  rules([]string{"rbac.authorization.k8s.io"}, []string{"rolebindings"}, admissionv1.Create, admissionv1.Update),
		match:  []admissionv1.MatchCondition{p.notOperator()},
		validations: []admissionv1.Validation{{
			Expression: "!has(object.subjects) || object.subjects.all(s, s.kind == 'ServiceAccount' && has(s.namespace) && s.namespace == object.metadata.namespace)",
			Message:    "RoleBindings in a ComputePlane may bind only ServiceAccounts of their own namespace",
		}},
	}
}

func (p Posture) deployerCredentialsPolicy() policy {
	return policy{
		// No match condition: pods are created by controllers (the ReplicaSet
		// controller's ServiceAccount lives in an exempt namespace), and neither the
		// operator nor an add-on ever needs a pod or a token of the deployer.
		name:   "deployer-credentials",
		canary: canaryDeployerPod,
		reason: "Flux impersonates the deployer only while the plane's gate is open; a pod running as the deployer (with its token mounted) or a non-expiring token Secret minted for it would keep applying with the deployer's rights after the gate closes. Refused to everyone, the operator included, in every namespace.",
		rules: append(rules([]string{""}, []string{"pods"}, admissionv1.Create),
			rules([]string{""}, []string{"secrets"}, admissionv1.Create, admissionv1.Update)...),
		validations: []admissionv1.Validation{
			{
				Expression: "request.resource.resource != 'pods' || " + namesNotDeployer("object.spec", "serviceAccountName", "serviceAccount"),
				Message:    "Pods may not run as the ComputePlane deployer (" + cpv1.DeployerName + "): it deploys only through the operator's gate",
			},
			{
				Expression: fmt.Sprintf("request.resource.resource != 'secrets' || !has(object.type) || object.type != 'kubernetes.io/service-account-token' || !has(object.metadata.annotations) || !(%[1]s in object.metadata.annotations) || object.metadata.annotations[%[1]s] != %[2]s",
					quote(corev1.ServiceAccountNameKey), quote(cpv1.DeployerName)),
				Message: "ServiceAccount token Secrets for the ComputePlane deployer (" + cpv1.DeployerName + ") are not allowed: its tokens would outlive the operator's gate",
			},
		},
	}
}

// namesNotDeployer is a CEL condition that none of the fields of obj (absent ones are
// fine) names the deployer. A pod names its ServiceAccount in serviceAccountName and in
// the deprecated serviceAccount alias, which the API server fills from each other.
func namesNotDeployer(obj string, fields ...string) string {
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		parts = append(parts, fmt.Sprintf("!(has(%[1]s.%[2]s) && %[1]s.%[2]s == %[3]s)", obj, f, quote(cpv1.DeployerName)))
	}
	return strings.Join(parts, " && ")
}

// namespaceDeleters are the identities Kubernetes deletes a namespace's objects as
// (kube-controller-manager's own, and its controllers' when it runs with
// --use-service-account-credentials): a namespace an administrator deletes must not hang
// on the operator's objects in it.
var namespaceDeleters = []string{
	"system:kube-controller-manager",
	"system:serviceaccount:kube-system:namespace-controller",
	"system:serviceaccount:kube-system:generic-garbage-collector",
}

// ownedSelector selects the objects the operator created in the plane: those carrying
// all of its labels (an object losing one is still matched, as its old version is). With
// no labels it selects nothing rather than everything.
func (p Posture) ownedSelector() *metav1.LabelSelector {
	if len(p.Labels) == 0 {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: cpv1.UnlabelledPostureLabel, Operator: metav1.LabelSelectorOpExists}}}
	}
	return &metav1.LabelSelector{MatchLabels: p.Labels}
}

type policy struct {
	name, reason string
	rules        []admissionv1.NamedRuleWithOperations
	ns           *metav1.LabelSelector
	// selector narrows the policy to objects with these labels (nil: all).
	selector    *metav1.LabelSelector
	match       []admissionv1.MatchCondition
	validations []admissionv1.Validation
	// canary is the proof that the policy is in force: a dry-run request it must refuse
	// (see Unenforced), given the plane's labels.
	canary func(labels map[string]string) client.Object
	// alsoEnforcedBy is a refusal by another admission layer that proves the same thing
	// (Pod Security runs before the policies and refuses the pod canary first).
	alsoEnforcedBy string
}

func (pol policy) objects(labels map[string]string) []client.Object {
	name := policyPrefix + pol.name
	vap := &admissionv1.ValidatingAdmissionPolicy{}
	vap.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"))
	vap.Name, vap.Labels = name, labels
	vap.Annotations = map[string]string{cpv1.ReasonAnnotation: pol.reason}
	// Every default the server fills in is spelled out, so a read-back can compare the
	// whole spec: an added exclusion, object selector or match policy is drift.
	ns, objects := pol.ns, pol.selector
	if ns == nil {
		ns = &metav1.LabelSelector{}
	}
	if objects == nil {
		objects = &metav1.LabelSelector{}
	}
	vap.Spec = admissionv1.ValidatingAdmissionPolicySpec{
		FailurePolicy: ptr.To(admissionv1.Fail),
		MatchConstraints: &admissionv1.MatchResources{
			ResourceRules:     pol.rules,
			NamespaceSelector: ns,
			ObjectSelector:    objects,
			MatchPolicy:       ptr.To(admissionv1.Equivalent),
		},
		MatchConditions: pol.match,
		Validations:     pol.validations,
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{}
	binding.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding"))
	binding.Name, binding.Labels = name, labels
	binding.Spec = admissionv1.ValidatingAdmissionPolicyBindingSpec{
		PolicyName:        name,
		ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
	}
	return []client.Object{vap, binding}
}

func rules(groups, resources []string, ops ...admissionv1.OperationType) []admissionv1.NamedRuleWithOperations {
	return []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: ops,
		// Scope spelled out as the server defaults it, so read-back compares equal.
		Rule: admissionv1.Rule{APIGroups: groups, APIVersions: []string{"*"}, Resources: resources, Scope: ptr.To(admissionv1.AllScopes)},
	}}}
}

func containersAll(cond string) string {
	parts := make([]string, 0, 3)
	for _, field := range []string{"containers", "initContainers", "ephemeralContainers"} {
		parts = append(parts, fmt.Sprintf("(!has(object.spec.%[1]s) || object.spec.%[1]s.all(c, %[2]s))", field, cond))
	}
	return strings.Join(parts, " && ")
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }

func list(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// nonEmpty keeps a NotIn selector valid when nothing is exempt.
func nonEmpty(items []string) []string {
	if len(items) == 0 {
		return []string{"-"}
	}
	return items
}
