package devenv_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
)

// TestAttackOwnerReferenceDeletesThePlane: a tenant bound to the shipped
// computeplane-tenant-edit role (update on its plane, no delete) gives the plane an
// ownerReference to an owner that does not exist; the garbage collector then deletes the
// plane, and tears its workloads down, as if the tenant could. Hardened distributions
// run OwnerReferencesPermissionEnforcement, which refuses it; a kube-apiserver as it
// comes does not (the suites' management apiserver enables it, so this one starts bare),
// and the shipped owner guard must. The chart's CRDs, roles and policies are installed
// as rendered; the plane's owner, who may delete it, still sets its owners.
func TestAttackOwnerReferenceDeletesThePlane(t *testing.T) {
	scheme := controllers.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme, Bare: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgmt.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := mgmt.Client
	root, err := devenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := devenv.RenderChart(root, devenv.OperatorNamespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if !slices.Contains([]string{"CustomResourceDefinition", "ClusterRole", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}, u.GetKind()) {
			continue
		}
		if err := c.Patch(ctx, u, client.Apply, client.FieldOwner("test"), client.ForceOwnership); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	user := func(name, role string) client.Client {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}}
		if err := c.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
		cfg := rest.CopyConfig(mgmt.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: []string{"system:authenticated"}}
		uc, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		return uc
	}
	alice, parent := user("alice", "computeplane-tenant-edit"), user("parent", "computeplane-owner")

	p := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "plane"}, Spec: cpv1.ComputePlaneSpec{ClassName: "any"}}
	if err := eventuallyNil(ctx, func() error { return c.Create(ctx, p) }); err != nil {
		t.Fatalf("the plane (the CRD established?): %v", err)
	}
	dangling := func(uc client.Client) error {
		got := &cpv1.ComputePlane{}
		if err := uc.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		patch := client.MergeFrom(got.DeepCopy())
		got.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "gone", UID: "00000000-0000-0000-0000-000000000000"}}
		return uc.Patch(ctx, got, patch)
	}
	const why = "setting or changing them needs delete on it"
	// RBAC and the policies take a moment to be in force: until the tenant can read its
	// plane and the guard refuses, keep trying; an accepted patch is the attack.
	err = eventuallyNil(ctx, func() error {
		switch err := dangling(alice); {
		case err == nil:
			return nil
		case strings.Contains(err.Error(), why):
			return nil
		default:
			return err
		}
	})
	switch got := dangling(alice); {
	case err != nil:
		t.Fatalf("the tenant could not try: %v", err)
	case got == nil:
		t.Fatal("a tenant without delete on its plane gave it an ownerReference: the garbage collector would delete it")
	case !strings.Contains(got.Error(), why):
		t.Fatalf("refused, but not by the owner guard: %v", got)
	}
	if err := eventuallyNil(ctx, func() error { return dangling(parent) }); err != nil {
		t.Errorf("the plane's owner, who may delete it, could not set its ownerReferences: %v", err)
	}
}

// eventuallyNil retries f until it returns nil or ctx ends.
func eventuallyNil(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
