package controllers_test

// Each test here is one way a hostile tenant (or a fault) could keep the gate open or
// reach what it must not, tried against the running operator on real apiservers (the
// management cluster and, where the attack needs one, a real plane). The README's
// threat model names them.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cozystack/computeplane/test/testkit"

	"github.com/cozystack/computeplane/controllers/tenancy"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	slim_metav1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/netpol"
)

// readyPlane creates a class, a plane "plane" with placement namespace "notebooks" in a
// new tenant namespace, and a real tenant apiserver standing in for its control plane,
// and waits until the plane is Ready.
func readyPlane(t *testing.T, ctx context.Context, class *cpv1.ComputePlaneClass, opts ...planeOpt) (*cpv1.ComputePlane, *devenv.Cluster) {
	t.Helper()
	tenant, err := devenv.StartTenant(k8s.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	opts = append([]planeOpt{func(p *cpv1.ComputePlane) { p.Spec.PlacementNamespaces = []string{"notebooks"} }}, opts...)
	p := planeWithClass(t, ctx, class, opts...)
	provideWithTenant(t, ctx, p, tenant)
	eventually(t, settle, conditionIs(ctx, client.ObjectKeyFromObject(p), cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	return p, tenant
}

// gateClosed checks that the plane is not Ready and its applier credential is gone.
func gateClosed(ctx context.Context, p *cpv1.ComputePlane) func() error {
	return testkit.GateClosed(ctx, k8s, p)
}

func applierSecretKey(p *cpv1.ComputePlane) client.ObjectKey {
	return client.ObjectKey{Namespace: p.Namespace, Name: tenancy.ApplierSecretName(p)}
}

// deployerClient uses an applier kubeconfig as Flux does: impersonating the deployer.
func deployerClient(t *testing.T, kubeconfig []byte, deployerNS string) (client.Client, *rest.Config) {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + deployerNS + ":computeplane-deployer"}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c, cfg
}

// planeDeployer is a client acting as the deployer of p's namespace, the way Flux
// does: with the applier kubeconfig the operator issued, impersonating the deployer.
func planeDeployer(t *testing.T, ctx context.Context, p *cpv1.ComputePlane) client.Client {
	t.Helper()
	secret := &corev1.Secret{}
	if err := k8s.Get(ctx, applierSecretKey(p), secret); err != nil {
		t.Fatal(err)
	}
	deployer, _ := deployerClient(t, secret.Data["value"], p.Namespace)
	return deployer
}

// asOperator is a management client with the operator's own identity (what a platform
// operator's break glass, or a crash, amounts to).
func asOperator(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(mgmt.OperatorConfig, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// deleteWithoutTeardown removes a plane the way a stripped finalizer did before the
// finalizer guard: the finalizer goes (here with the operator's own identity, the only
// one the guard lets through) and the object is deleted before the operator looks again
// (a finalizer change is no generation change, so it wakes no reconcile).
func deleteWithoutTeardown(t *testing.T, ctx context.Context, p *cpv1.ComputePlane) {
	t.Helper()
	op := asOperator(t)
	if err := op.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Finalizers = nil
	if err := op.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	// Someone with delete rights (the operator has none on ComputePlanes) deletes it.
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, planeGone(ctx, client.ObjectKeyFromObject(p)))
}

// TestAttackDatastoreStoppedClosesTheGate: a plane whose etcd dies still answers
// /version. The gate must close (Ready False, applier credential gone) within the probe
// interval and grace, not stay open through the error backoff; it reopens when etcd is
// back.
func TestAttackDatastoreStoppedClosesTheGate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, tenant := readyPlane(t, ctx, newClass("etcd-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)

	if err := tenant.StopEtcd(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	eventually(t, settle, gateClosed(ctx, p))
	t.Logf("gate closed %s after etcd stopped", time.Since(stopped).Round(time.Millisecond))

	if err := tenant.StartEtcd(); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	eventually(t, settle, func() error { return k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}) })
}

// TestAttackTenantStripsFinalizer: a tenant bound to the shipped tenant-edit role cannot
// remove the operator's finalizer (the teardown would be skipped and the plane's VMs left
// running with no owner); the plane's owner can still delete it, and the operator tears
// it down.
func TestAttackTenantStripsFinalizer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := newClass("strip-" + rand.String(6))
	p := planeWithClass(t, ctx, class, withGroup("workers", medium))
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.ProvisionedCondition, metav1.ConditionFalse, cpv1.WaitingForInfrastructureReason))

	alice := tenantUser(t, ctx, p.Namespace, "alice")
	got := &cpv1.ComputePlane{}
	if err := alice.Get(ctx, key, got); err != nil {
		t.Fatalf("the tenant cannot read its plane: %v", err)
	}
	strip := client.MergeFrom(got.DeepCopy())
	got.Finalizers = nil
	denied(t, alice.Patch(ctx, got, strip), "finalizer is removed by the operator once the plane's teardown has finished")
	if err := alice.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	got.Finalizers = []string{"example.com/other"}
	denied(t, alice.Update(ctx, got), "finalizer is removed by the operator")

	// Deleting is the owner's right (the parent tenant's); the operator's teardown then
	// runs to the end.
	parent := ownerUser(t, ctx, p.Namespace, "parent")
	if err := parent.Delete(ctx, got); err != nil {
		t.Fatalf("the owner cannot delete the plane: %v", err)
	}
	eventually(t, settle, planeGone(ctx, key))
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: infraOf(p), Name: "plane"}, &clusterv1.Cluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("the teardown did not run: the Cluster is still there (err=%v)", err)
	}
}

// TestAttackTenantLeavesEveryShard: a tenant relabels its plane for a shard no manager
// runs, so that no operator reconciles it any more (its drift unrepaired, its gate never
// closed by the operator). Setting, changing or removing sharding.fluxcd.io/key is
// refused to the tenant, on create and on update; a platform operator bound to
// computeplane-shard may.
func TestAttackTenantLeavesEveryShard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := newClass("shard-" + rand.String(6))
	p := planeWithClass(t, ctx, class)
	key := client.ObjectKeyFromObject(p)
	alice := tenantUser(t, ctx, p.Namespace, "alice")
	const refusal = "setting the sharding.fluxcd.io/key label needs update on computeplanes/shard"

	got := &cpv1.ComputePlane{}
	if err := alice.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	relabel := client.MergeFrom(got.DeepCopy())
	got.Labels = map[string]string{cpv1.ShardKeyLabel: "nobody-runs-this", "team": "a"}
	denied(t, alice.Patch(ctx, got, relabel), refusal)

	other := newPlane(tenantNamespace(t, ctx), "plane", class.Name)
	other.Labels = map[string]string{cpv1.ShardKeyLabel: "nobody-runs-this"}
	// Nor may the plane's owner, who creates it: assigning shards is the platform's.
	owner := ownerUser(t, ctx, other.Namespace, "alices-parent")
	denied(t, owner.Create(ctx, other), refusal)

	// Other labels stay the tenant's to set.
	if err := alice.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	relabel = client.MergeFrom(got.DeepCopy())
	got.Labels = map[string]string{"team": "a"}
	if err := alice.Patch(ctx, got, relabel); err != nil {
		t.Fatalf("a tenant cannot set an ordinary label: %v", err)
	}

	// A platform operator assigns the shard, and only it may take the assignment away.
	ops := platformOperator(t, ctx, "sre-shard")
	if err := ops.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	relabel = client.MergeFrom(got.DeepCopy())
	got.Labels[cpv1.ShardKeyLabel] = "shard1"
	if err := ops.Patch(ctx, got, relabel); err != nil {
		t.Fatalf("a platform operator cannot assign the shard: %v", err)
	}
	if err := alice.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	relabel = client.MergeFrom(got.DeepCopy())
	delete(got.Labels, cpv1.ShardKeyLabel)
	denied(t, alice.Patch(ctx, got, relabel), refusal)
}

// tenantUser binds user to the tenant roles config/default installs
// (config/rbac/tenant_roles.yaml, which a real cluster also aggregates into admin and
// edit) in namespace and returns a client acting as that user.
func tenantUser(t *testing.T, ctx context.Context, namespace, user string) client.Client {
	t.Helper()
	return boundUser(t, ctx, namespace, user, clusterRoles("computeplane-tenant-edit", "computeplane-tenant-view"),
		func(c client.Client) error {
			return c.List(ctx, &cpv1.ComputePlaneList{}, client.InNamespace(namespace))
		})
}

// boundUser binds user to refs in namespace and returns a client acting as that user
// (authenticated, in no other group) once ready, a read the bindings allow, passes:
// RBAC takes a moment to see new bindings.
func boundUser(t *testing.T, ctx context.Context, namespace, user string, refs []rbacv1.RoleRef, ready func(client.Client) error) client.Client {
	t.Helper()
	for _, ref := range refs {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user + "-" + ref.Name},
			RoleRef:  ref,
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		if err := k8s.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(mgmt.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error { return ready(c) })
	return c
}

// clusterRoles are references to ClusterRoles, for boundUser.
func clusterRoles(names ...string) []rbacv1.RoleRef {
	refs := make([]rbacv1.RoleRef, 0, len(names))
	for _, n := range names {
		refs = append(refs, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: n})
	}
	return refs
}

// TestAttackPlaneRecreatedOverLeftovers: a plane removed without its teardown leaves its
// infrastructure (and VMs) behind. A new plane of the same name must neither take over
// nor rewrite what is left: the old VMs stay selected by their own baseline and by the
// namespace's default deny.
func TestAttackPlaneRecreatedOverLeftovers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	class := newClass("again-" + rand.String(6))
	old, _ := readyPlane(t, ctx, class)
	oldInfra := infraOf(old)
	baselineKey := client.ObjectKey{Namespace: oldInfra, Name: netpol.BaselineName(old.Name, string(old.UID))}
	denyKey := client.ObjectKey{Namespace: oldInfra, Name: netpol.DefaultDenyName}
	baseline, deny := &ciliumv2.CiliumNetworkPolicy{}, &ciliumv2.CiliumNetworkPolicy{}
	if err := k8s.Get(ctx, baselineKey, baseline); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, denyKey, deny); err != nil {
		t.Fatal(err)
	}
	deleteWithoutTeardown(t, ctx, old)

	p := newPlane(old.Namespace, old.Name, class.Name)
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.ProvisionedCondition, metav1.ConditionFalse, cpv1.WaitingForInfrastructureReason))
	if infraOf(p) == oldInfra {
		t.Fatalf("the new plane shares the old plane's infrastructure namespace %s", oldInfra)
	}
	for _, c := range []struct {
		key client.ObjectKey
		was *ciliumv2.CiliumNetworkPolicy
	}{{baselineKey, baseline}, {denyKey, deny}} {
		now := &ciliumv2.CiliumNetworkPolicy{}
		if err := k8s.Get(ctx, c.key, now); err != nil {
			t.Fatalf("the old plane's %s is gone: %v", c.key.Name, err)
		}
		if now.ResourceVersion != c.was.ResourceVersion {
			t.Errorf("the new plane rewrote the old plane's %s", c.key.Name)
		}
	}
	// Nothing of the old plane's was touched by the new one's selectors.
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: oldInfra, Name: old.Name}, &clusterv1.Cluster{}); err != nil {
		t.Errorf("the old plane's Cluster is gone: %v", err)
	}
}

// TestAttackPreexistingInfrastructureNamespace: a namespace that already exists where a
// plane's infrastructure would go (someone's data, or a squatter's) is never used,
// labelled or deleted.
func TestAttackPreexistingInfrastructureNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	className := "squat-" + rand.String(6)
	p := createPlane(t, ctx, className) // the class does not exist yet: the plane waits
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.ValidCondition, metav1.ConditionFalse, cpv1.ClassNotFoundReason))
	squat := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: infraOf(p), Labels: map[string]string{"owner": "someone"}}}
	if err := k8s.Create(ctx, squat); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: squat.Name, Name: "data"}}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, newClass(className)); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, conditionIs(ctx, key, cpv1.ValidCondition, metav1.ConditionFalse, cpv1.InfrastructureConflictReason))

	if err := k8s.Get(ctx, client.ObjectKeyFromObject(squat), squat); err != nil {
		t.Fatal(err)
	}
	if len(squat.Labels) != 2 || squat.Labels["owner"] != "someone" { // its own and kubernetes.io/metadata.name
		t.Errorf("the operator relabelled a namespace it did not create: %v", squat.Labels)
	}
	var clusters clusterv1.ClusterList
	if err := k8s.List(ctx, &clusters, client.InNamespace(squat.Name)); err != nil || len(clusters.Items) != 0 {
		t.Errorf("the operator put %d Clusters into a namespace it did not create (err=%v)", len(clusters.Items), err)
	}
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, planeGone(ctx, key))
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(squat), squat); err != nil || !squat.DeletionTimestamp.IsZero() {
		t.Errorf("the teardown deleted a namespace the operator did not create (err=%v)", err)
	}
}

// TestAttackClassNotAllowedForNamespace: a class decides posture (where infrastructure
// lives, Pod Security, egress); a tenant may use only the classes that select its
// namespace.
func TestAttackClassNotAllowedForNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gold := newClass("gold-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	})
	unset := newClass("unset-"+rand.String(6), func(c *cpv1.ComputePlaneClass) { c.Spec.AllowedNamespaces = nil })
	for _, c := range []*cpv1.ComputePlaneClass{gold, unset} {
		if err := k8s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	ns := tenantNamespace(t, ctx)
	denied(t, k8s.Create(ctx, newPlane(ns, "plane", gold.Name)), `does not allow namespace "`+ns+`" (its spec.allowedNamespaces selects tier=gold)`)
	denied(t, k8s.Create(ctx, newPlane(ns, "plane", unset.Name)), "is unset, which allows no namespace")

	// Created before its class existed (admission could not check), refused once it does.
	className := "later-" + rand.String(6)
	p := newPlane(ns, "plane", className)
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(p)
	later := newClass(className, func(c *cpv1.ComputePlaneClass) {
		c.Spec.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	})
	if err := k8s.Create(ctx, later); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, conditionIs(ctx, key, cpv1.ValidCondition, metav1.ConditionFalse, cpv1.NamespaceNotAllowedReason))
	eventually(t, settle, conditionIs(ctx, key, cpv1.StalledCondition, metav1.ConditionTrue, cpv1.NamespaceNotAllowedReason))
	if err := k8s.Get(ctx, client.ObjectKey{Name: infraOf(p)}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("infrastructure was created for a plane its class does not allow (err=%v)", err)
	}

	// A platform operator labels the namespace: the plane proceeds.
	nsObj := &corev1.Namespace{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(nsObj.DeepCopy())
	nsObj.Labels["tier"] = "gold"
	if err := k8s.Patch(ctx, nsObj, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, conditionIs(ctx, key, cpv1.ValidCondition, metav1.ConditionTrue, cpv1.SucceededReason))
}

// TestAttackPlacementIntoPrivilegedNamespace: placement namespaces are where the
// deployer gets rights; the class's exempt namespaces (no pod hardening there) and its
// add-ons' namespaces (service accounts trusted like the operator) are refused.
func TestAttackPlacementIntoPrivilegedNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := newClass("exempt-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.PodSecurity.ExemptNamespaces = []string{"kube-system", "cilium-system"}
		c.Spec.Addons[0].TargetNamespace = "cilium-system"
		c.Spec.Addons = append(c.Spec.Addons, cpv1.SystemAddon{Name: "certs", Role: cpv1.AddonRoleCertManager, TargetNamespace: "cert-manager",
			ChartRef: cpv1.AddonChartRef{Kind: "OCIRepository", Name: "cert-manager"}})
	})
	p := planeWithClass(t, ctx, class, func(p *cpv1.ComputePlane) { p.Spec.PlacementNamespaces = []string{"cilium-system", "cert-manager"} })
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.ValidCondition, metav1.ConditionFalse, cpv1.SpecExceedsClassReason))
	got := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	msg := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ValidCondition).Message
	for _, want := range []string{"cilium-system is exempt from Pod Security", "cert-manager is add-on certs's target namespace"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Valid message %q lacks %q", msg, want)
		}
	}
}

// TestAttackCopiedTokenOutlivesSecret: the tenant copies the applier token and deletes
// the Secret it came in. When the gate closes, the copy must stop working all the same.
func TestAttackCopiedTokenOutlivesSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("copy-"+rand.String(6)), withGroup("workers", medium))
	key := client.ObjectKeyFromObject(p)
	secret := &corev1.Secret{}
	if err := k8s.Get(ctx, applierSecretKey(p), secret); err != nil {
		t.Fatal(err)
	}
	copied, _ := deployerClient(t, secret.Data["value"], p.Namespace)
	deploy := func() error {
		return copied.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", GenerateName: "x-"}}, client.DryRunAll)
	}
	if err := deploy(); err != nil {
		t.Fatalf("the copied credential does not work while the gate is open: %v", err)
	}
	// Let the reconciles that brought the plane up finish, so none re-issues the Secret
	// between its deletion and the gate closing (the attack's window).
	requestReconcile(t, ctx, p, "settled")
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		if got.Status.LastHandledReconcileAt != "settled" {
			return errors.New("the reconcile request is not handled yet")
		}
		return nil
	})
	if err := k8s.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}

	// The gate closes (the spec now exceeds the class).
	if err := k8s.Get(ctx, key, p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	g := p.Spec.NodeGroups["workers"]
	g.MaxReplicas = 99
	p.Spec.NodeGroups["workers"] = g
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	// The apiserver caches a token's authentication for up to 10 s.
	eventually(t, 40*time.Second, func() error {
		if err := deploy(); err == nil || !apierrors.IsUnauthorized(err) {
			return fmt.Errorf("the copied token still works with the gate closed (err=%v)", err)
		}
		return nil
	})

	// Reopened, the plane issues a new credential; the copy stays dead.
	patch = client.MergeFrom(p.DeepCopy())
	g.MaxReplicas = 2
	p.Spec.NodeGroups["workers"] = g
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	if err := deploy(); !apierrors.IsUnauthorized(err) {
		t.Errorf("the copied token came back to life with the gate (err=%v)", err)
	}
	if err := k8s.Get(ctx, applierSecretKey(p), secret); err != nil {
		t.Fatal(err)
	}
	checkApplier(t, ctx, secret, p.Namespace)
}

// TestAttackPoliciesNotEnforced: a plane whose apiserver stores admission policies but
// does not enforce them (its ValidatingAdmissionPolicy plugin is off, as a tampered or
// misconfigured control plane might have it; or simply a moment after they are
// written) reads back as hardened. The gate must not open on that: every policy must
// refuse what it forbids first.
func TestAttackPoliciesNotEnforced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tenant, err := devenv.StartTenantWith(k8s.Scheme(), devenv.TenantOptions{DisableAdmissionPlugins: []string{"ValidatingAdmissionPolicy"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	p := planeWithClass(t, ctx, newClass("unenforced-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	provideWithTenant(t, ctx, p, tenant)
	eventually(t, settle, conditionIs(ctx, key, cpv1.AdmissionCondition, metav1.ConditionFalse, cpv1.NotEnforcedReason))
	got := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if msg := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.AdmissionCondition).Message; !strings.Contains(msg, "computeplane-service-account-tokens") {
		t.Errorf("AdmissionPoliciesReady does not name what is not enforced: %q", msg)
	}
	// It stays closed: no credential, whatever the plane reads back.
	time.Sleep(3 * time.Second)
	if err := k8s.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if apimeta.IsStatusConditionTrue(got.Status.Conditions, cpv1.ReadyCondition) {
		t.Error("Ready is True on a plane that enforces none of its policies")
	}
	if err := k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("an applier credential was issued for a plane that enforces none of its policies (err=%v)", err)
	}
}

// TestAttackDeployerWidensItsReach: the deployer (what a placement release's chart runs
// as) tries to mint itself a token that never expires, and to hand its rights to anyone
// who can reach the plane or to other namespaces' service accounts.
func TestAttackDeployerWidensItsReach(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("widen-"+rand.String(6)))
	deployer := planeDeployer(t, ctx, p)
	dry := client.DryRunAll
	forever := func(sa string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "forever",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: sa}}, Type: corev1.SecretTypeServiceAccountToken}
	}
	// Two policies refuse one for the deployer itself (computeplane-service-account-tokens
	// and computeplane-deployer-credentials); which one answers first is the apiserver's
	// choice. A chart's own ServiceAccount is refused by the general one alone.
	denied(t, deployer.Create(ctx, forever("computeplane-deployer"), dry), "ServiceAccount token Secrets")
	denied(t, deployer.Create(ctx, forever("default"), dry), "ServiceAccount token Secrets (non-expiring tokens) are not allowed")
	bind := func(s rbacv1.Subject) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", GenerateName: "widen-"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "computeplane-deployer"}, Subjects: []rbacv1.Subject{s}}
	}
	for _, s := range []rbacv1.Subject{
		{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:unauthenticated"},
		{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"},
		{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "default"},
	} {
		denied(t, deployer.Create(ctx, bind(s), dry), "may bind only ServiceAccounts of their own namespace")
	}
	// Its own binding names the deployer of another namespace, so it cannot be edited
	// to add anyone either.
	rb := &rbacv1.RoleBinding{}
	if err := deployer.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: "computeplane-deployer"}, rb); err != nil {
		t.Fatal(err)
	}
	widened := rb.DeepCopy()
	widened.Subjects = append(widened.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "notebooks", Name: "default"})
	// Two policies refuse it; the API server names the first it evaluated.
	if err := deployer.Update(ctx, widened, dry); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") ||
		!strings.Contains(err.Error(), "may bind only ServiceAccounts of their own namespace") && !strings.Contains(err.Error(), ownedByOperator) {
		t.Errorf("widening its own binding: %v; want a refusal by the plane's policies", err)
	}
	// Nor can it take the operator's objects away (which would close its plane's gate
	// over and over) or forge one: what the operator created is refused to anyone else.
	denied(t, deployer.Delete(ctx, rb, dry), ownedByOperator)
	role := &rbacv1.Role{}
	if err := deployer.Get(ctx, client.ObjectKey{Namespace: "notebooks", Name: "computeplane-deployer"}, role); err != nil {
		t.Fatal(err)
	}
	role.Rules = role.Rules[1:]
	denied(t, deployer.Update(ctx, role, dry), ownedByOperator)
	denied(t, deployer.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", Name: "forged",
		Labels: rb.Labels}}, dry), ownedByOperator)
	// A chart binding its own ServiceAccount still works.
	if err := deployer.Create(ctx, bind(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "notebooks", Name: "app"}), dry); err != nil {
		t.Errorf("a chart cannot bind its own ServiceAccount: %v", err)
	}
}

// ownedByOperator is how the plane refuses a change to what the operator created there.
const ownedByOperator = "only the operator may create, change or delete it"

// TestAttackEditsThatKeepTheAnnotation: `kubectl edit` keeps the operator's applied-hash
// annotation. An edit of what the operator owns, in the plane or on the management
// cluster, is still found (content is compared, not the annotation), reported where the
// gate depends on it, and restored.
func TestAttackEditsThatKeepTheAnnotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("edit-"+rand.String(6)),
		withGroup("fixed", cpv1.NodeGroup{MinReplicas: 2, MaxReplicas: 2, InstanceType: "u1.medium"}))
	key := client.ObjectKeyFromObject(p)
	operator := operatorClient(t, ctx, p)
	infra := infraOf(p)

	// In the plane: the deployer's Role gains pods/exec.
	role := &rbacv1.Role{}
	roleKey := client.ObjectKey{Namespace: "notebooks", Name: "computeplane-deployer"}
	if err := operator.Get(ctx, roleKey, role); err != nil {
		t.Fatal(err)
	}
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}})
	if err := operator.Update(ctx, role); err != nil {
		t.Fatal(err)
	}
	// Only the operator's own credential can edit it (the plane refuses anyone else), and
	// no watch follows Roles: the next full read finds it, here at once on request.
	requestReconcile(t, ctx, p, "role-edited")
	eventually(t, settle, func() error {
		if err := operator.Get(ctx, roleKey, role); err != nil {
			return err
		}
		for _, r := range role.Rules {
			if len(r.Resources) == 1 && r.Resources[0] == "pods/exec" {
				return errors.New("the deployer still holds pods/exec")
			}
		}
		return nil
	})

	// On the management cluster: the baseline selects nothing any more.
	cnpKey := client.ObjectKey{Namespace: infra, Name: netpol.BaselineName(p.Name, string(p.UID))}
	cnp := &ciliumv2.CiliumNetworkPolicy{}
	if err := k8s.Get(ctx, cnpKey, cnp); err != nil {
		t.Fatal(err)
	}
	cnp.Spec.EndpointSelector.MatchExpressions = []slim_metav1.LabelSelectorRequirement{{Key: "k8s:nothing", Operator: slim_metav1.LabelSelectorOpExists}}
	if err := k8s.Update(ctx, cnp); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, cnpKey, cnp); err != nil {
			return err
		}
		if len(cnp.Spec.EndpointSelector.MatchExpressions) != 0 {
			return errors.New("the baseline's selector is still narrowed")
		}
		return nil
	})
	// The namespace's default deny stops denying (once the gate is open again: a change
	// made while a repair is under way is simply repaired with it).
	eventually(t, settle, conditionIs(ctx, key, cpv1.EgressCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	denyKey := client.ObjectKey{Namespace: infra, Name: netpol.DefaultDenyName}
	if err := k8s.Get(ctx, denyKey, cnp); err != nil {
		t.Fatal(err)
	}
	cnp.Spec.EnableDefaultDeny.Egress = ptr.To(false)
	if err := k8s.Update(ctx, cnp); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, denyKey, cnp); err != nil {
			return err
		}
		if e := cnp.Spec.EnableDefaultDeny.Egress; e == nil || !*e {
			return errors.New("the default deny is still off")
		}
		return nil
	})

	// The control plane is exposed differently and scaled; the fixed group is scaled.
	kcp := kamajiControlPlane()
	kcpKey := client.ObjectKey{Namespace: infra, Name: p.Name}
	if err := k8s.Get(ctx, kcpKey, kcp); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(kcp.Object, "LoadBalancer", "spec", "network", "serviceType"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Update(ctx, kcp); err != nil {
		t.Fatal(err)
	}
	md := &clusterv1.MachineDeployment{}
	mdKey := client.ObjectKey{Namespace: infra, Name: p.Name + "-fixed"}
	if err := k8s.Get(ctx, mdKey, md); err != nil {
		t.Fatal(err)
	}
	md.Spec.Replicas = ptr.To[int32](7)
	if err := k8s.Update(ctx, md); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, kcpKey, kcp); err != nil {
			return err
		}
		if st, _, _ := unstructured.NestedString(kcp.Object, "spec", "network", "serviceType"); st != "ClusterIP" {
			return fmt.Errorf("KamajiControlPlane serviceType = %s", st)
		}
		if err := k8s.Get(ctx, mdKey, md); err != nil {
			return err
		}
		if *md.Spec.Replicas != 2 {
			return fmt.Errorf("MachineDeployment replicas = %d", *md.Spec.Replicas)
		}
		return nil
	})
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	for _, what := range []string{"Role notebooks/computeplane-deployer", "CiliumNetworkPolicy " + cnpKey.String(), "CiliumNetworkPolicy " + denyKey.String(),
		"KamajiControlPlane " + kcpKey.String(), "MachineDeployment " + mdKey.String()} {
		eventually(t, settle, driftReported(ctx, p, what))
	}
}

// driftReported checks that a Drifted Warning event of the plane names what.
func driftReported(ctx context.Context, p *cpv1.ComputePlane, what string) func() error {
	return func() error {
		var evs corev1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(p.Namespace)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.UID == p.UID && e.Reason == cpv1.DriftedReason && strings.Contains(e.Message, what) {
				return nil
			}
		}
		return fmt.Errorf("no Drifted event names %s", what)
	}
}

func kamajiControlPlane() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(render.KamajiAPIVersion)
	u.SetKind(render.KamajiControlPlaneKind)
	return u
}

// privilegedMutatingPolicy is a MutatingAdmissionPolicy a plane's cluster-admin could
// add to rewrite what the plane admits.
func privilegedMutatingPolicy() *admissionv1.MutatingAdmissionPolicy {
	return &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "privileged-everything"},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"namespaces"}}}}}},
			Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: "Object{}"}}},
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
		}}
}

// privilegedMutatingBinding binds privilegedMutatingPolicy: what makes it act.
func privilegedMutatingBinding() *admissionv1.MutatingAdmissionPolicyBinding {
	return &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "privileged-everything"},
		Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "privileged-everything"}}
}

// TestAttackMutatingPolicyInPlane: Kubernetes runs no admission policy on mutating
// admission policies, so a cluster-admin of the plane who is not the operator can add
// one, and bind it, to rewrite what the plane admits. The gate closes at once (the
// binding is watched) and stays closed while either exists.
func TestAttackMutatingPolicyInPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, tenant := readyPlane(t, ctx, newClass("mutate-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	mallory := asUser(t, tenant, "mallory")
	mapObj, binding := privilegedMutatingPolicy(), privilegedMutatingBinding()
	if err := mallory.Create(ctx, mapObj); err != nil {
		t.Fatalf("the plane refused a MutatingAdmissionPolicy (then this attack needs no defence): %v", err)
	}
	if err := mallory.Create(ctx, binding); err != nil {
		t.Fatalf("the plane refused a MutatingAdmissionPolicyBinding (then this attack needs no defence): %v", err)
	}
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.AdmissionCondition)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "MutatingAdmissionPolicy privileged-everything exists") {
			return fmt.Errorf("AdmissionPoliciesReady = %+v", c)
		}
		if apimeta.IsStatusConditionTrue(got.Status.Conditions, cpv1.ReadyCondition) {
			return errors.New("Ready is True")
		}
		return nil
	})
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, applierSecretKey(p), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the applier credential is still issued (err=%v)", err)
		}
		return nil
	})
	// The policy first: the binding's deletion (watched) then finds neither.
	if err := mallory.Delete(ctx, mapObj); err != nil {
		t.Fatal(err)
	}
	if err := mallory.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
}

// TestDriftFightBacksOff: another writer that keeps relabelling a placement namespace
// fights the operator. Each round closes the gate and, on repair, re-issues the
// credential; the repairs back off instead of looping hot.
func TestDriftFightBacksOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("fight-"+rand.String(6)))
	operator := operatorClient(t, ctx, p)
	var restores atomic.Int32
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		ns := &corev1.Namespace{}
		if err := operator.Get(ctx, client.ObjectKey{Name: "notebooks"}, ns); err != nil {
			t.Fatal(err)
		}
		if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
			restores.Add(1)
			patch := client.MergeFrom(ns.DeepCopy())
			ns.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
			if err := operator.Patch(ctx, ns, patch); err != nil && !apierrors.IsConflict(err) {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Repairs 1..n wait 0, 0.5, 1, 2, 4 s: about five fit in six seconds.
	if n := restores.Load(); n > 10 {
		t.Errorf("the operator restored the namespace %d times in 6 s: the fight is a hot loop", n)
	} else {
		t.Logf("%d repairs in 6 s of fighting", n)
	}
	if n := restores.Load(); n < 2 {
		t.Errorf("only %d repairs: the operator stopped repairing", n)
	}
}

// TestPlaneDeletedWithoutTeardownIsForgotten: the operator stops talking to (and
// watching) a plane that is gone, even when its teardown never ran.
func TestPlaneDeletedWithoutTeardownIsForgotten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("forget-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	if !watching(key) {
		t.Fatal("a Ready plane is not in the plane cache")
	}
	deleteWithoutTeardown(t, ctx, p)
	eventually(t, settle, func() error {
		if reconciler.Planes.Known(key) || watching(key) {
			return errors.New("the operator still holds a connection and informers for a deleted plane")
		}
		return nil
	})
}

// watching reports whether the operator holds a connection to the plane and runs its
// informers.
func watching(key client.ObjectKey) bool {
	for _, c := range reconciler.Planes.Connections() {
		if c.Key == key {
			return c.Watching
		}
	}
	return false
}
