package remote

import (
	"context"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// Unenforced returns the policies the plane's API server does not enforce yet. A policy
// that reads back as written may still not be in force: the API server loads new
// policies a moment after they are created. For each policy it sends, as the canary, a
// dry-run request the policy must refuse; the policy is in force once the refusal names
// it. (The API server reports which policy refused only in the message.) Pod hardening
// is in force when Pod Security or the policy refuses: Pod Security runs first. labels
// are the plane's (Posture.Labels), which the operator-objects policy guards.
func Unenforced(ctx context.Context, canary client.Client, labels map[string]string) ([]string, error) {
	var out []string
	for _, probe := range canaryProbes(labels) {
		err := canary.Create(ctx, probe.obj, client.DryRunAll)
		switch {
		case err == nil:
			out = append(out, policyPrefix+probe.policy)
		case strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policyPrefix+probe.policy+"'"):
		case probe.policy == "pod-hardening" && strings.Contains(err.Error(), "violates PodSecurity"):
		default:
			return nil, fmt.Errorf("checking that %s%s is in force: %w", policyPrefix, probe.policy, err)
		}
	}
	return out, nil
}

type canaryProbe struct {
	policy string
	obj    client.Object
}

// canaryProbes are one request per policy that the policy must refuse, in the
// operator's own namespace (never created: every request is a dry run).
func canaryProbes(labels map[string]string) []canaryProbe {
	meta := metav1.ObjectMeta{Namespace: ApplierNamespace, Name: "computeplane-canary"}
	psa := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "computeplane-canary", Labels: map[string]string{PSAEnforce: "privileged"}}}
	pod := &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{HostNetwork: true, ServiceAccountName: CanaryServiceAccount,
		AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{Name: "c", Image: "canary"}}}}
	svc := &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Port: 80}}}}
	hook := &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "computeplane-canary"},
		Webhooks: []admissionv1.ValidatingWebhook{{Name: "canary.computeplane.cozystack.io", SideEffects: ptr.To(admissionv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"}, ClientConfig: admissionv1.WebhookClientConfig{URL: ptr.To("https://canary.invalid")}}}}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "canaries.computeplane.cozystack.io"},
		"spec": map[string]any{"group": "computeplane.cozystack.io", "scope": "Namespaced",
			"names": map[string]any{"plural": "canaries", "singular": "canary", "kind": "Canary", "listKind": "CanaryList"},
			"conversion": map[string]any{"strategy": "Webhook", "webhook": map[string]any{"conversionReviewVersions": []any{"v1"},
				"clientConfig": map[string]any{"url": "https://canary.invalid"}}},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object"}}}}},
	}}
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ApplierNamespace, Name: "computeplane-canary",
		Annotations: map[string]string{corev1.ServiceAccountNameKey: ApplierName}}, Type: corev1.SecretTypeServiceAccountToken}
	binding := &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:unauthenticated"}}}
	forged := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ApplierNamespace, Name: "computeplane-canary-forged", Labels: labels}}
	// Admitted by Pod Security at any level and by the pod hardening: only what it runs
	// as refuses it (a token Secret for the deployer would be refused by
	// service-account-tokens too, and the refusal names either policy).
	asDeployer := &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{ServiceAccountName: DeployerName,
		AutomountServiceAccountToken: ptr.To(false),
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "c", Image: "canary", SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
	return []canaryProbe{
		{"pod-security-labels", psa},
		{"pod-hardening", pod},
		{"service-exposure", svc},
		{"admission-guard", hook},
		{"crd-conversion-webhooks", crd},
		{"service-account-tokens", token},
		{"rolebinding-subjects", binding},
		{"operator-objects", forged},
		{"deployer-credentials", asDeployer},
	}
}
