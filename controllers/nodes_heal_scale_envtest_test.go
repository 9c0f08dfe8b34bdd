package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/computeplane"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
)

var fixedSize = cpv1.NodeGroup{MinReplicas: 1, MaxReplicas: 1, InstanceType: "u1.medium"}

// TestHealthCheckDefaultsAndBounds: a class that says nothing gets the documented
// health check from the CRD, and a threshold that is neither a count nor a percentage
// is refused.
func TestHealthCheckDefaultsAndBounds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := newClass("hc-defaults-" + rand.String(6))
	if err := k8s.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	hc := class.Spec.NodeGroups.HealthCheck
	if ptr.Deref(hc.NodeStartupTimeoutSeconds, -1) != 1200 || hc.UnhealthyLessThanOrEqualTo == nil || *hc.UnhealthyLessThanOrEqualTo != intstr.FromString("40%") {
		t.Errorf("defaulted health check = %+v", hc)
	}
	for _, bad := range []intstr.IntOrString{intstr.FromString("150%"), intstr.FromString("half"), intstr.FromInt32(-1)} {
		c := newClass("hc-bad-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
			c.Spec.NodeGroups.HealthCheck.UnhealthyLessThanOrEqualTo = ptr.To(bad)
		})
		if err := k8s.Create(ctx, c); !apierrors.IsInvalid(err) {
			t.Errorf("unhealthyLessThanOrEqualTo %s: err = %v, want Invalid", bad.String(), err)
		}
	}
}

// TestMachineHealthCheckPerNodeGroup: every node group gets a MachineHealthCheck that
// the real Cluster API CRD accepts, selecting the group's Machines, with the class's
// thresholds; a loosened one is put back, a class change reaches it, a removed group
// takes its health check along, and the teardown leaves none behind (there is no
// garbage collector here, as there is none the operator counts on).
func TestMachineHealthCheckPerNodeGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	class := newClass("hc-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.NodeGroups.HealthCheck = cpv1.NodeHealthCheck{
			NodeStartupTimeoutSeconds:  ptr.To(int32(900)),
			UnhealthyNodeConditions:    []cpv1.UnhealthyNodeCondition{{Type: "Ready", Status: "Unknown", TimeoutSeconds: 120}},
			UnhealthyLessThanOrEqualTo: ptr.To(intstr.FromInt32(1)),
		}
	})
	p := planeWithClass(t, ctx, class, withGroup("workers", medium), withGroup("fixed", fixedSize))
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, func() error { return k8s.Get(ctx, key, p) })
	infra := infraOf(p)

	healthCheck := func(group string, check func(*clusterv1.MachineHealthCheck) error) func() error {
		return func() error {
			mhc := &clusterv1.MachineHealthCheck{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: render.MachineDeploymentName(p, group)}, mhc); err != nil {
				return err
			}
			return check(mhc)
		}
	}
	thresholds := func(startup int32, max intstr.IntOrString) func(*clusterv1.MachineHealthCheck) error {
		return func(mhc *clusterv1.MachineHealthCheck) error {
			got := mhc.Spec.Remediation.TriggerIf.UnhealthyLessThanOrEqualTo
			if ptr.Deref(mhc.Spec.Checks.NodeStartupTimeoutSeconds, -1) != startup || got == nil || *got != max {
				return fmt.Errorf("nodeStartupTimeoutSeconds %v, unhealthyLessThanOrEqualTo %v; want %d, %s",
					mhc.Spec.Checks.NodeStartupTimeoutSeconds, got, startup, max.String())
			}
			return nil
		}
	}
	for _, group := range []string{"workers", "fixed"} {
		eventually(t, settle, healthCheck(group, func(mhc *clusterv1.MachineHealthCheck) error {
			md := &clusterv1.MachineDeployment{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: mhc.Name}, md); err != nil {
				return err
			}
			sel, err := metav1.LabelSelectorAsSelector(&mhc.Spec.Selector)
			if err != nil {
				return err
			}
			mdSel, _ := metav1.LabelSelectorAsSelector(&md.Spec.Selector)
			if sel.String() != mdSel.String() || mhc.Spec.ClusterName != "plane" {
				return fmt.Errorf("selects %s of cluster %q, its MachineDeployment %s", sel, mhc.Spec.ClusterName, mdSel)
			}
			want := []clusterv1.UnhealthyNodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: ptr.To(int32(120))}}
			if !slices.EqualFunc(mhc.Spec.Checks.UnhealthyNodeConditions, want, func(a, b clusterv1.UnhealthyNodeCondition) bool {
				return a.Type == b.Type && a.Status == b.Status && ptr.Deref(a.TimeoutSeconds, -1) == ptr.Deref(b.TimeoutSeconds, -2)
			}) {
				return fmt.Errorf("unhealthyNodeConditions %+v", mhc.Spec.Checks.UnhealthyNodeConditions)
			}
			return thresholds(900, intstr.FromInt32(1))(mhc)
		}))
	}

	// Someone with rights in the infrastructure namespace loosens it: it is put back.
	mhc := &clusterv1.MachineHealthCheck{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: render.MachineDeploymentName(p, "workers")}, mhc); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(mhc.DeepCopy())
	mhc.Spec.Remediation.TriggerIf.UnhealthyLessThanOrEqualTo = ptr.To(intstr.FromString("100%"))
	if err := k8s.Patch(ctx, mhc, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, healthCheck("workers", thresholds(900, intstr.FromInt32(1))))

	// The class owns the thresholds: a change there reaches every group.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), class); err != nil {
			return err
		}
		class.Spec.NodeGroups.HealthCheck.UnhealthyLessThanOrEqualTo = ptr.To(intstr.FromString("30%"))
		return k8s.Update(ctx, class)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, healthCheck("fixed", thresholds(900, intstr.FromString("30%"))))

	// A group that goes takes its health check along.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, key, p); err != nil {
			return err
		}
		delete(p.Spec.NodeGroups, "fixed")
		return k8s.Update(ctx, p)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		err := healthCheck("fixed", func(*clusterv1.MachineHealthCheck) error { return nil })()
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the removed group's MachineHealthCheck is still there (err=%v)", err)
	})

	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, planeGone(ctx, key))
	var left clusterv1.MachineHealthCheckList
	if err := k8s.List(ctx, &left, client.InNamespace(infra)); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Errorf("%d MachineHealthCheck(s) left in %s after the teardown", len(left.Items), infra)
	}
}

// autoscalerObjects are the plane's autoscaler objects found in its infrastructure
// namespace (nil for those missing).
func autoscalerObjects(ctx context.Context, p *cpv1.ComputePlane) (*corev1.ServiceAccount, *rbacv1.RoleBinding, *appsv1.Deployment, error) {
	key := client.ObjectKey{Namespace: infraOf(p), Name: render.AutoscalerName(p)}
	sa, rb, d := &corev1.ServiceAccount{}, &rbacv1.RoleBinding{}, &appsv1.Deployment{}
	found := func(o client.Object) (bool, error) {
		err := k8s.Get(ctx, key, o)
		return err == nil, client.IgnoreNotFound(err)
	}
	var err error
	var hasSA, hasRB, hasD bool
	if hasSA, err = found(sa); err == nil {
		if hasRB, err = found(rb); err == nil {
			hasD, err = found(d)
		}
	}
	if !hasSA {
		sa = nil
	}
	if !hasRB {
		rb = nil
	}
	if !hasD {
		d = nil
	}
	return sa, rb, d, err
}

func autoscalerPresent(ctx context.Context, p *cpv1.ComputePlane, want bool) func() error {
	return func() error {
		sa, rb, d, err := autoscalerObjects(ctx, p)
		if err != nil {
			return err
		}
		if got := []bool{sa != nil, rb != nil, d != nil}; !slices.Equal(got, []bool{want, want, want}) {
			return fmt.Errorf("ServiceAccount, RoleBinding, Deployment present: %v, want all %v", got, want)
		}
		return nil
	}
}

func setGroup(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, name string, g cpv1.NodeGroup) {
	t.Helper()
	// The operator writes the plane too (its finalizer): retry on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Spec.NodeGroups[name] = g
		return k8s.Update(ctx, p)
	}); err != nil {
		t.Fatal(err)
	}
}

// asServiceAccount is a client acting as the ServiceAccount ns/name, as its pod would.
func asServiceAccount(t *testing.T, ns, name string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(mgmt.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClusterAutoscalerWhileAGroupAutoscales: a plane of fixed-size groups has no
// autoscaler; once a group autoscales, its ServiceAccount, RoleBinding and Deployment are
// accepted by the real apiserver (RBAC's escalation checks included: the operator holds
// only `bind` on the shipped role). As its ServiceAccount, the autoscaler resizes a
// MachineDeployment through the real scale subresource, and the operator leaves the
// size it chose alone; it reads no Secret and reaches no other namespace. A changed
// Deployment is put back at the next full read, the operator's rights to write it are
// bound in the infrastructure namespace alone, and the autoscaler and those rights go
// when no group autoscales any more, and with the plane.
func TestClusterAutoscalerWhileAGroupAutoscales(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A real plane: the autoscaler is kept with its own identity there, on a verified plane.
	p, _ := readyPlane(t, ctx, newClass("ca-"+rand.String(6)), withGroup("workers", fixedSize))
	key := client.ObjectKeyFromObject(p)
	infra := infraOf(p)
	mdKey := client.ObjectKey{Namespace: infra, Name: render.MachineDeploymentName(p, "workers")}
	eventually(t, settle, func() error { return k8s.Get(ctx, mdKey, &clusterv1.MachineDeployment{}) })
	if err := autoscalerPresent(ctx, p, false)(); err != nil {
		t.Fatalf("fixed-size groups: %v", err)
	}

	setGroup(t, ctx, p, "workers", cpv1.NodeGroup{MinReplicas: 1, MaxReplicas: 4, InstanceType: "u1.medium"})
	eventually(t, settle, autoscalerPresent(ctx, p, true))
	_, rb, d, err := autoscalerObjects(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if rb.RoleRef.Name != render.AutoscalerClusterRole {
		t.Errorf("RoleBinding binds %s", rb.RoleRef.Name)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Name: render.AutoscalerClusterRole}, &rbacv1.ClusterRole{}); err != nil {
		t.Errorf("the shipped ClusterRole %s: %v", render.AutoscalerClusterRole, err)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--node-group-auto-discovery=clusterapi:namespace="+infra+",clusterName=plane") {
		t.Errorf("args %q do not confine discovery to %s", args, infra)
	}

	// As the autoscaler: resize the group through the scale subresource.
	ca := asServiceAccount(t, infra, render.AutoscalerName(p))
	md := &clusterv1.MachineDeployment{}
	if err := ca.Get(ctx, mdKey, md); err != nil {
		t.Fatalf("the autoscaler cannot read its MachineDeployment: %v", err)
	}
	scale := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":3}}`))
	if err := ca.SubResource("scale").Patch(ctx, md, scale); err != nil {
		t.Fatalf("the autoscaler cannot scale %s: %v", mdKey, err)
	}
	var machines clusterv1.MachineList
	if err := ca.List(ctx, &machines, client.InNamespace(infra)); err != nil {
		t.Errorf("the autoscaler cannot list Machines: %v", err)
	}
	// What it must not do.
	if err := k8s.Get(ctx, mdKey, md); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"read the admin kubeconfig":                   ca.Get(ctx, client.ObjectKey{Namespace: infra, Name: render.AdminKubeconfigSecretName(p)}, &corev1.Secret{}),
		"delete its MachineDeployment":                ca.Delete(ctx, md.DeepCopy()),
		"patch its MachineDeployment":                 ca.Patch(ctx, md.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`))),
		"list another namespace's MachineDeployments": ca.List(ctx, &clusterv1.MachineDeploymentList{}, client.InNamespace(p.Namespace)),
		"list MachineDeployments cluster-wide":        ca.List(ctx, &clusterv1.MachineDeploymentList{}),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the autoscaler could %s (err=%v)", what, err)
		}
	}
	// The operator leaves the size the autoscaler chose (it owns no replicas of an
	// autoscaled group), through a full pass.
	requestReconcile(t, ctx, p, "after-scale")
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		if got.Status.LastHandledReconcileAt != "after-scale" {
			return fmt.Errorf("reconcile request not handled yet")
		}
		return nil
	})
	if err := k8s.Get(ctx, mdKey, md); err != nil || ptr.Deref(md.Spec.Replicas, -1) != 3 {
		t.Errorf("replicas = %v after a reconcile (err=%v), want the autoscaler's 3", md.Spec.Replicas, err)
	}

	// Someone widens its discovery: put back at the plane's next pass (nothing watches
	// the Deployment: an informer would need Deployments cluster-wide).
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Template.Spec.Containers[0].Args = []string{"--cloud-provider=clusterapi"}
	if err := k8s.Patch(ctx, d, patch); err != nil {
		t.Fatal(err)
	}
	requestReconcile(t, ctx, p, "after-widening")
	eventually(t, settle, func() error {
		_, _, d, err := autoscalerObjects(ctx, p)
		if err != nil || d == nil {
			return fmt.Errorf("deployment: %v, err=%v", d, err)
		}
		if got := d.Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, render.AutoscalerArgs(infra, "plane")) {
			return fmt.Errorf("args %q", got)
		}
		return nil
	})

	// The operator took its rights on the autoscaler in this namespace only.
	managerBinding := client.ObjectKey{Namespace: infra, Name: computeplane.AutoscalerManagerRole}
	if err := k8s.Get(ctx, managerBinding, &rbacv1.RoleBinding{}); err != nil {
		t.Errorf("the operator's RoleBinding %s: %v", managerBinding, err)
	}

	setGroup(t, ctx, p, "workers", fixedSize)
	eventually(t, settle, autoscalerPresent(ctx, p, false))
	// With the autoscaler, the operator's rights on it go.
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, managerBinding, &rbacv1.RoleBinding{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the operator's RoleBinding %s is still there (err=%v)", managerBinding, err)
		}
		return nil
	})

	setGroup(t, ctx, p, "workers", medium)
	eventually(t, settle, autoscalerPresent(ctx, p, true))
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, planeGone(ctx, key))
	if err := autoscalerPresent(ctx, p, false)(); err != nil {
		t.Errorf("after the teardown: %v", err)
	}
	if err := k8s.Get(ctx, managerBinding, &rbacv1.RoleBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the teardown, the operator's RoleBinding %s (err=%v)", managerBinding, err)
	}
}
