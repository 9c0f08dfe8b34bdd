package posture

import (
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// CanaryUser is who the operator impersonates, with the group system:masters, to check
// that the plane's API server enforces the policies: a cluster administrator who is
// neither the operator nor an exempt ServiceAccount, so every policy applies to it.
const CanaryUser = "computeplane:admission-canary"

// CanaryServiceAccount is what the pod hardening canary's pod runs as (the pod is never
// created: the requests are dry runs); it has no rights and mounts no token. The
// deployer-credentials canary's pod runs as the operator namespace's ServiceAccount of
// the deployer's name, which has no rights either (Posture.PlacementObjects).
const CanaryServiceAccount = "computeplane-canary"

// The canaries: for each policy of Posture.policies, one request the policy must refuse,
// in the operator's own namespace (never created: Unenforced sends them as dry runs).
// Each is refused by its own policy only, as far as the other policies go, so a refusal
// proves that one policy in force.

var canaryMeta = metav1.ObjectMeta{Namespace: ApplierNamespace, Name: "computeplane-canary"}

func canaryPSANamespace(map[string]string) client.Object {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "computeplane-canary", Labels: map[string]string{cpv1.PodSecurityEnforceLabel: "privileged"}}}
}

func canaryHostNetworkPod(map[string]string) client.Object {
	return &corev1.Pod{ObjectMeta: canaryMeta, Spec: corev1.PodSpec{HostNetwork: true, ServiceAccountName: CanaryServiceAccount,
		AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{Name: "c", Image: "canary"}}}}
}

func canaryNodePortService(map[string]string) client.Object {
	return &corev1.Service{ObjectMeta: canaryMeta, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Port: 80}}}}
}

func canaryWebhook(map[string]string) client.Object {
	return &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "computeplane-canary"},
		Webhooks: []admissionv1.ValidatingWebhook{{Name: "canary.computeplane.cozystack.io", SideEffects: ptr.To(admissionv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"}, ClientConfig: admissionv1.WebhookClientConfig{URL: ptr.To("https://canary.invalid")}}}}
}

func canaryConversionCRD(map[string]string) client.Object {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "canaries.computeplane.cozystack.io"},
		"spec": map[string]any{"group": "computeplane.cozystack.io", "scope": "Namespaced",
			"names": map[string]any{"plural": "canaries", "singular": "canary", "kind": "Canary", "listKind": "CanaryList"},
			"conversion": map[string]any{"strategy": "Webhook", "webhook": map[string]any{"conversionReviewVersions": []any{"v1"},
				"clientConfig": map[string]any{"url": "https://canary.invalid"}}},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object"}}}}},
	}}
}

func canaryTokenSecret(map[string]string) client.Object {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ApplierNamespace, Name: "computeplane-canary",
		Annotations: map[string]string{corev1.ServiceAccountNameKey: ApplierName}}, Type: corev1.SecretTypeServiceAccountToken}
}

func canaryUnauthenticatedBinding(map[string]string) client.Object {
	return &rbacv1.RoleBinding{ObjectMeta: canaryMeta, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:unauthenticated"}}}
}

// canaryForgedServiceAccount carries the plane's labels, which the policy guards.
func canaryForgedServiceAccount(labels map[string]string) client.Object {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ApplierNamespace, Name: "computeplane-canary-forged", Labels: labels}}
}

// canaryDeployerPod is admitted by Pod Security at any level and by the pod hardening:
// only what it runs as refuses it (a token Secret for the deployer would be refused by
// service-account-tokens too, and the refusal names either policy).
func canaryDeployerPod(map[string]string) client.Object {
	return &corev1.Pod{ObjectMeta: canaryMeta, Spec: corev1.PodSpec{ServiceAccountName: cpv1.DeployerName,
		AutomountServiceAccountToken: ptr.To(false),
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "c", Image: "canary", SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
}

// Canary is one policy's proof of being in force: a request it must refuse, sent as a
// dry run (remote.Unenforced).
type Canary struct {
	// Policy names the policy (and its binding).
	Policy string
	// Request is what the policy must refuse, carrying the plane's labels where the
	// policy guards them.
	Request client.Object
	// alsoRefusedBy is a refusal by another admission layer that proves the same thing
	// (Pod Security runs before the policies and refuses the pod canary first).
	alsoRefusedBy string
}

// RefusedBy reports whether err, the answer to the canary's request, is the refusal that
// proves its policy in force: the API server names the refusing policy only in the
// message.
func (c Canary) RefusedBy(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "ValidatingAdmissionPolicy '"+c.Policy+"'") ||
		c.alsoRefusedBy != "" && strings.Contains(msg, c.alsoRefusedBy)
}

// Canaries are the canaries of the named policies (nil: every policy's).
func (p Posture) Canaries(names []string) []Canary {
	var out []Canary
	for _, pol := range p.policies() {
		name := policyPrefix + pol.name
		if names == nil || slices.Contains(names, name) {
			out = append(out, Canary{Policy: name, Request: pol.canary(p.Labels), alsoRefusedBy: pol.alsoEnforcedBy})
		}
	}
	return out
}
