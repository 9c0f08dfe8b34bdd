package controllers_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// optInRefusal is what the service-access guard answers a requester without the right.
const optInRefusal = "needs update on computeplanes/grant"

// serviceUser binds user, in namespace, to the Service rights the built-in edit role
// gives a tenant there (get, list, create, update, patch, delete), plus the given
// ClusterRoles, and returns a client acting as that user once RBAC sees the bindings.
func serviceUser(t *testing.T, ctx context.Context, namespace, user string, roles ...string) client.Client {
	t.Helper()
	editor := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user + "-services"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}
	if err := k8s.Create(ctx, editor); err != nil {
		t.Fatal(err)
	}
	refs := append([]rbacv1.RoleRef{{APIGroup: rbacv1.GroupName, Kind: "Role", Name: editor.Name}}, clusterRoles(roles...)...)
	return boundUser(t, ctx, namespace, user, refs,
		func(c client.Client) error { return c.List(ctx, &corev1.ServiceList{}, client.InNamespace(namespace)) })
}

// editService reads the Service as c, applies change and patches it back as c.
func editService(ctx context.Context, c client.Client, key client.ObjectKey, change func(*corev1.Service)) error {
	svc := &corev1.Service{}
	if err := c.Get(ctx, key, svc); err != nil {
		return err
	}
	patch := client.MergeFrom(svc.DeepCopy())
	change(svc)
	return c.Patch(ctx, svc, patch)
}

func labelled(plane string) func(*corev1.Service) {
	return func(svc *corev1.Service) {
		if plane == "" {
			delete(svc.Labels, cpv1.ServiceAccessLabel)
		} else {
			metav1.SetMetaDataLabel(&svc.ObjectMeta, cpv1.ServiceAccessLabel, plane)
		}
	}
}

// TestAttackTenantOptsItsOwnServiceIn: the plane's tenant, who may edit the Services of
// its namespace (as the built-in edit role allows), asks for a Service and opts it in
// itself, so that "the plane asks, the Service's owner agrees" is one party, and a
// platform-owned Service in the namespace can be opened. Setting the opt-in label, or
// changing its plane, is refused to the tenant on create and on update, and so is
// retargeting an opted-in Service (its selector or ports, which the grant follows); a
// user bound to computeplane-service-access opts in and the grant follows; one bound
// for another plane only cannot; removing the label (a revocation) stays anyone's who
// may edit the Service, as does every other write to a Service.
func TestAttackTenantOptsItsOwnServiceIn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("optin-"+rand.String(6)), withService("postgres", 5432))
	ns := p.Namespace
	key := client.ObjectKey{Namespace: ns, Name: "postgres"}
	tenantUser(t, ctx, ns, "alice")
	alice := serviceUser(t, ctx, ns, "alice")

	// Created opted in, by the tenant: refused.
	denied(t, alice.Create(ctx, service(ns, "postgres", p.Name, map[string]string{"app": "postgres"}, 5432)), optInRefusal)
	// Any other Service write stays the tenant's.
	if err := alice.Create(ctx, service(ns, "postgres", "", map[string]string{"app": "postgres"}, 5432)); err != nil {
		t.Fatalf("a tenant cannot create an ordinary Service: %v", err)
	}
	if err := editService(ctx, alice, key, func(s *corev1.Service) { metav1.SetMetaDataLabel(&s.ObjectMeta, "team", "a") }); err != nil {
		t.Fatalf("a tenant cannot label its Service: %v", err)
	}
	// Opted in later, by the tenant: refused, naming the right to ask for.
	denied(t, editService(ctx, alice, key, labelled(p.Name)), "needs update on computeplanes/grant named "+p.Name+" in "+ns+" (the computeplane-service-access ClusterRole)")
	eventually(t, settle, grantStates(ctx, client.ObjectKeyFromObject(p), map[string]cpv1.GrantState{"postgres": cpv1.GrantPending}))

	// Bound for another plane only: refused too.
	scoped := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "grant-elsewhere"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{cpv1.GroupVersion.Group}, Resources: []string{"computeplanes/grant"},
			Verbs: []string{"update"}, ResourceNames: []string{"elsewhere"}}}}
	if err := k8s.Create(ctx, scoped); err != nil {
		t.Fatal(err)
	}
	erin := serviceUser(t, ctx, ns, "erin")
	if err := k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "erin-grant-elsewhere"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: scoped.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "erin"}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error { return editService(ctx, erin, key, labelled("elsewhere")) })
	denied(t, editService(ctx, erin, key, labelled(p.Name)), optInRefusal)

	// The Service's owner (a data-platform team) holds the shipped role: the grant
	// follows its opt-in.
	dana := serviceUser(t, ctx, ns, "dana", "computeplane-service-access")
	eventually(t, settle, func() error { return editService(ctx, dana, key, labelled(p.Name)) })
	eventually(t, settle, grantsAre(ctx, p, "postgres"))

	// Once opted in, the tenant can neither move the grant to another plane nor point
	// the Service (and so the grant) at other pods or ports.
	denied(t, editService(ctx, alice, key, labelled("elsewhere")), optInRefusal)
	denied(t, editService(ctx, alice, key, func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "platform-vault"} }), optInRefusal)
	denied(t, editService(ctx, alice, key, func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(8200) }), optInRefusal)
	// Other writes to it stay the tenant's.
	if err := editService(ctx, alice, key, func(s *corev1.Service) { metav1.SetMetaDataAnnotation(&s.ObjectMeta, "note", "mine") }); err != nil {
		t.Fatalf("a tenant cannot annotate an opted-in Service: %v", err)
	}
	// Revoking closes access only: anyone who may edit (or delete) the Service may.
	if err := editService(ctx, alice, key, labelled("")); err != nil {
		t.Fatalf("a tenant cannot remove the opt-in: %v", err)
	}
	eventually(t, settle, grantsAre(ctx, p))
}
