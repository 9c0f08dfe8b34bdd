package controllers_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/computeplane"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/internal/devenv"
)

// operatorMay asks the management apiserver whether the operator may do verb on
// Secrets in namespace.
func operatorMay(t *testing.T, ctx context.Context, verb, namespace string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               devenv.OperatorUser,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + devenv.OperatorNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Resource: "secrets"},
	}}
	if err := k8s.Create(ctx, sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

// TestSecretRightsOnlyWhereNeeded: the operator ships with no right on Secrets; it binds
// itself the shipped computeplane-secrets role in a plane's tenant and infrastructure
// namespaces only, puts the binding back when a tenant removes it (the gate keeps
// working), never takes over a binding of that name it did not create, and removes its
// binding with the plane.
func TestSecretRightsOnlyWhereNeeded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if operatorMay(t, ctx, "get", "kube-system") || operatorMay(t, ctx, "list", "") {
		t.Fatal("the operator may read Secrets outside its planes' namespaces")
	}
	p, _ := readyPlane(t, ctx, newClass("secrets-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	for _, ns := range []string{p.Namespace, infraOf(p)} {
		if !operatorMay(t, ctx, "get", ns) {
			t.Errorf("the operator cannot read Secrets in %s, where its plane needs it", ns)
		}
	}
	// It lists and watches them there (their metadata: controllers/secret_versions.go),
	// and nowhere else.
	if operatorMay(t, ctx, "get", "kube-system") || operatorMay(t, ctx, "list", "") || operatorMay(t, ctx, "watch", "kube-system") {
		t.Error("the operator's Secret rights reach beyond what its planes need")
	}

	// A tenant admin removes the binding: the next Secret request puts it back.
	binding := &rbacv1.RoleBinding{}
	bkey := client.ObjectKey{Namespace: p.Namespace, Name: computeplane.SecretsBinding}
	if err := k8s.Get(ctx, bkey, binding); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	requestReconcile(t, ctx, p, "after-unbind")
	eventually(t, settle, func() error {
		if !operatorMay(t, ctx, "get", p.Namespace) {
			return fmt.Errorf("the operator's binding was not put back")
		}
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		if got.Status.LastHandledReconcileAt != "after-unbind" {
			return fmt.Errorf("the reconcile request is not handled yet")
		}
		return conditionIs(ctx, key, cpv1.ReadyCondition, "True", cpv1.SucceededReason)()
	})

	// A tenant admin swaps the binding's subject for itself (a binding is the tenant's
	// to edit in its namespace): the operator, refused, takes it back, with its own
	// subject only.
	if err := k8s.Get(ctx, bkey, binding); err != nil {
		t.Fatal(err)
	}
	swapped := binding.DeepCopy()
	swapped.Subjects = []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}}
	if err := k8s.Update(ctx, swapped); err != nil {
		t.Fatal(err)
	}
	requestReconcile(t, ctx, p, "after-swap")
	eventually(t, settle, func() error {
		got := &rbacv1.RoleBinding{}
		if err := k8s.Get(ctx, bkey, got); err != nil {
			return err
		}
		if !reflect.DeepEqual(got.Subjects, binding.Subjects) {
			return fmt.Errorf("the binding's subjects are %v, want the operator's alone (%v)", got.Subjects, binding.Subjects)
		}
		return conditionIs(ctx, key, cpv1.ReadyCondition, "True", cpv1.SucceededReason)()
	})

	// Deleting the plane revokes the applier Secret, then drops the binding.
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, planeGone(ctx, key))
	if err := k8s.Get(ctx, bkey, &rbacv1.RoleBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("the operator's Secret binding outlived its plane (err=%v)", err)
	}

	// A binding of that name the operator did not create is never taken over: the plane
	// cannot issue its credential, and says why.
	foreign := &rbacv1.RoleBinding{ObjectMeta: bindingMeta(p.Namespace),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "someone"}}}
	if err := k8s.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	tenant, err := devenv.StartTenant(k8s.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	again := newPlane(p.Namespace, "again", p.Spec.ClassName)
	if err := k8s.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	provideWithTenant(t, ctx, again, tenant)
	eventually(t, settle, func() error {
		got := &rbacv1.RoleBinding{}
		if err := k8s.Get(ctx, bkey, got); err != nil {
			return err
		}
		if got.RoleRef.Name != "view" || len(got.Subjects) != 1 || got.Subjects[0].Name != "someone" {
			t.Fatalf("the operator rewrote a RoleBinding it did not create: %+v", got)
		}
		plane := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(again), plane); err != nil {
			return err
		}
		ids := apimeta.FindStatusCondition(plane.Status.Conditions, cpv1.IdentitiesCondition)
		if ids == nil || ids.Status != metav1.ConditionFalse || !strings.Contains(ids.Message, "was not created by the operator") {
			return fmt.Errorf("IdentitiesReady = %+v", ids)
		}
		if apimeta.IsStatusConditionTrue(plane.Status.Conditions, cpv1.ReadyCondition) {
			t.Fatal("Ready without the applier credential")
		}
		return nil
	})
}

func bindingMeta(namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: computeplane.SecretsBinding}
}
