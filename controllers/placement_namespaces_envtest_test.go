package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func setPlacementNamespaces(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, names ...string) {
	t.Helper()
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Spec.PlacementNamespaces = names
		return k8s.Update(ctx, p)
	})
}

// deployerBound says whether the deployer's Role or RoleBinding exists in ns.
func deployerBound(ctx context.Context, c client.Client, ns string) (bool, error) {
	key := client.ObjectKey{Namespace: ns, Name: cpv1.DeployerName}
	for _, o := range []client.Object{&rbacv1.RoleBinding{}, &rbacv1.Role{}} {
		switch err := c.Get(ctx, key, o); {
		case err == nil:
			return true, nil
		case !apierrors.IsNotFound(err):
			return false, err
		}
	}
	return false, nil
}

// TestAttackPlacementNamespaceAdopted: an add-on keeps a token in its own namespace in
// the plane; the tenant lists that namespace in spec.placementNamespaces, so that the
// operator binds the deployer there and a placement release reads the token. The
// operator never adopts a namespace it did not create: the plane is Valid=False naming
// it, the gate closes, and the namespace is left exactly as it was.
func TestAttackPlacementNamespaceAdopted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, tenant := readyPlane(t, ctx, newClass("adopt-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	const addon = "addon-aux"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: addon, Labels: map[string]string{"owner": "addon"}}}
	if err := tenant.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: addon, Name: "addon-token"}, StringData: map[string]string{"token": "s3cr3t"}}
	if err := tenant.Client.Create(ctx, token); err != nil {
		t.Fatal(err)
	}

	setPlacementNamespaces(t, ctx, p, "notebooks", addon)
	eventually(t, settle, func() error {
		if err := conditionIs(ctx, key, cpv1.ValidCondition, metav1.ConditionFalse, cpv1.PlacementNamespaceConflictReason)(); err != nil {
			return err
		}
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		if c := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ValidCondition); !strings.Contains(c.Message, addon) {
			return fmt.Errorf("Valid does not name the namespace: %s", c.Message)
		}
		if !apimeta.IsStatusConditionTrue(got.Status.Conditions, cpv1.StalledCondition) {
			return errors.New("not Stalled")
		}
		return gateClosed(ctx, p)()
	})
	// A few more passes: it stays so.
	time.Sleep(3 * time.Second)
	if bound, err := deployerBound(ctx, tenant.Client, addon); err != nil || bound {
		t.Fatalf("the deployer was bound in %s (err=%v)", addon, err)
	}
	if err := tenant.Client.Get(ctx, client.ObjectKeyFromObject(ns), ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels[cpv1.PlacementNamespaceLabel] != "" || ns.Labels[cpv1.PlaneUIDLabel] != "" {
		t.Errorf("the add-on's namespace was relabelled: %v", ns.Labels)
	}

	setPlacementNamespaces(t, ctx, p, "notebooks")
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
}

// TestPlacementNamespaceRemovedUnbindsTheDeployer: a namespace taken out of
// spec.placementNamespaces keeps its objects, but the deployer's Role and RoleBinding
// there go: placement releases may no longer write into it.
func TestPlacementNamespaceRemovedUnbindsTheDeployer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, tenant := readyPlane(t, ctx, newClass("unbind-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	if bound, err := deployerBound(ctx, tenant.Client, "notebooks"); err != nil || !bound {
		t.Fatalf("the deployer is not bound in notebooks to begin with (err=%v)", err)
	}
	setPlacementNamespaces(t, ctx, p)
	eventually(t, settle, func() error {
		for _, o := range []client.Object{&rbacv1.RoleBinding{}, &rbacv1.Role{}} {
			if err := tenant.Client.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: cpv1.DeployerName}, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still in notebooks (err=%v)", o, cpv1.DeployerName, err)
			}
		}
		return nil
	})
	if err := tenant.Client.Get(ctx, client.ObjectKey{Name: "notebooks"}, &corev1.Namespace{}); err != nil {
		t.Errorf("the namespace itself went: %v", err)
	}
	if bound, err := deployerBound(ctx, tenant.Client, p.Namespace); err != nil || !bound {
		t.Errorf("the deployer lost its own namespace (err=%v)", err)
	}
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
}

// TestAttackExemptionOverATenantNamespace: a namespace the operator created for
// placement releases keeps the tenant's objects after the plane's spec drops it. When the
// class later exempts a namespace of that name from Pod Security (for an add-on, say), the
// operator relabelled it privileged with the tenant's workloads inside, and trusted its
// service accounts like itself. Now it is never exempted: it keeps the class's level and
// the plane says why (Valid=False/PlacementNamespaceConflict, the gate closed).
func TestAttackExemptionOverATenantNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	class := newClass("claimed-" + rand.String(6))
	p, tenant := readyPlane(t, ctx, class)
	key := client.ObjectKeyFromObject(p)
	setPlacementNamespaces(t, ctx, p)
	eventually(t, settle, func() error {
		if bound, err := deployerBound(ctx, tenant.Client, "notebooks"); err != nil || bound {
			return fmt.Errorf("the deployer is still bound in notebooks (err=%v)", err)
		}
		return nil
	})
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), class); err != nil {
			return err
		}
		class.Spec.PodSecurity.ExemptNamespaces = []string{"kube-system", "notebooks"}
		return k8s.Update(ctx, class)
	})
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ValidCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != cpv1.PlacementNamespaceConflictReason ||
			!strings.Contains(c.Message, "exemptNamespaces lists notebooks, which the operator created in the plane for placement releases") {
			return fmt.Errorf("Valid = %+v, want False/%s naming notebooks", c, cpv1.PlacementNamespaceConflictReason)
		}
		return nil
	})
	ns := &corev1.Namespace{}
	if err := tenant.Client.Get(ctx, client.ObjectKey{Name: "notebooks"}, ns); err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels[cpv1.PodSecurityEnforceLabel]; got != "restricted" {
		t.Errorf("the tenant's namespace is enforced at %q, want restricted", got)
	}
	// Nor are its service accounts trusted like the operator by the plane's policies.
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := tenant.Client.Get(ctx, client.ObjectKey{Name: "computeplane-service-exposure"}, vap); err != nil {
		t.Fatal(err)
	}
	for _, m := range vap.Spec.MatchConditions {
		if strings.Contains(m.Expression, "notebooks") {
			t.Errorf("match condition %s trusts %q; want no identity of the tenant's namespace", m.Name, m.Expression)
		}
	}
	// The exemption of a namespace the tenant never had still holds.
	if err := tenant.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, ns); err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels[cpv1.PodSecurityEnforceLabel]; got != "privileged" {
		t.Errorf("kube-system is enforced at %q, want privileged", got)
	}
}
