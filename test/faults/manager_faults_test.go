package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/tenancy"
	"github.com/cozystack/computeplane/remote/posture"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/testkit"
)

// stageOrder is the provisioning stages in the order the reconciler runs them.
var stageOrder = []string{
	cpv1.ValidCondition, cpv1.ProvisionedCondition, cpv1.PodSecurityCondition, cpv1.AdmissionCondition,
	cpv1.EgressCondition, cpv1.NetworkPoliciesCondition, cpv1.IdentitiesCondition,
}

// provisioningPoints names where a plane's provisioning is, by what the test can see of
// it: the first stage not yet True, and the first write of each stage; ready once the
// plane is Ready.
func provisioningPoints(ctx context.Context, p *cpv1.ComputePlane) (points []string, ready bool) {
	got := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
		return nil, false
	}
	if apimeta.IsStatusConditionTrue(got.Status.Conditions, cpv1.ReadyCondition) {
		return nil, true
	}
	for _, c := range stageOrder {
		if !apimeta.IsStatusConditionTrue(got.Status.Conditions, c) {
			points = append(points, "status: "+c+" not yet True")
			break
		}
	}
	infra := got.Status.InfrastructureNamespace
	if infra == "" {
		return points, false
	}
	if k8s.Get(ctx, client.ObjectKey{Name: infra}, &corev1.Namespace{}) == nil {
		points = append(points, "infrastructure namespace created")
	}
	if k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: render.ClusterName(got)}, &clusterv1.Cluster{}) == nil {
		points = append(points, "Cluster created")
	}
	tenant := provider.Tenant(types.NamespacedName{Namespace: infra, Name: render.ClusterName(got)})
	if tenant == nil {
		return points, false
	}
	points = append(points, "plane apiserver up")
	vaps := &admissionregistrationv1.ValidatingAdmissionPolicyList{}
	if tenant.Client.List(ctx, vaps) == nil && len(vaps.Items) > 0 {
		points = append(points, "first admission policy in the plane")
	}
	if tenant.Client.Get(ctx, client.ObjectKey{Namespace: posture.ApplierNamespace, Name: posture.ApplierName}, &corev1.ServiceAccount{}) == nil {
		points = append(points, "applier ServiceAccount in the plane")
	}
	if k8s.Get(ctx, client.ObjectKey{Namespace: got.Namespace, Name: tenancy.ApplierSecretName(got)}, &corev1.Secret{}) == nil {
		points = append(points, "applier kubeconfig Secret written")
	}
	return points, false
}

// killAtEachPoint SIGKILLs the manager the first time each point shows (it is restarted,
// as the kubelet would, and its successor waits out the lease), until done.
func killAtEachPoint(t *testing.T, timeout time.Duration, points func() ([]string, bool), at func(string)) []string {
	t.Helper()
	var killed []string
	seen := map[string]bool{}
	deadline := time.Now().Add(timeout)
	for {
		now, done := points()
		if done {
			return killed
		}
		var fresh []string
		for _, pt := range now {
			if !seen[pt] {
				seen[pt] = true
				fresh = append(fresh, pt)
			}
		}
		if len(fresh) > 0 {
			// One kill for what showed together; the next kill waits for the restarted
			// manager, so every kill hits a running one.
			manager.Kill()
			killed = append(killed, strings.Join(fresh, " + "))
			for _, pt := range fresh {
				if at != nil {
					at(pt)
				}
			}
			if err := manager.WaitReady(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, killed at %v, the plane is still at %v%s", timeout, killed, now, manager.Tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestManagerKilledAtEveryStage: the manager is SIGKILLed at every provisioning stage
// and every teardown stage. Each time its successor resumes; the plane ends up exactly
// as a plane that met no fault (no duplicate, nothing missing, on either side), and its
// teardown leaves nothing behind.
func TestManagerKilledAtEveryStage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ref := newPlane(t, ctx)
	waitFor(t, 2*time.Minute, readyIs(ctx, ref, metav1.ConditionTrue))
	refMgmt, refPlane := inventory(t, ctx, ref, tenantOf(t, ctx, ref).Config)

	runs := manager.Runs()
	start := time.Now()
	p := newPlane(t, ctx)
	killed := killAtEachPoint(t, 5*time.Minute, func() ([]string, bool) { return provisioningPoints(ctx, p) }, nil)
	waitFor(t, 2*time.Minute, readyIs(ctx, p, metav1.ConditionTrue))
	note(t, "provisioning: kills", fmt.Sprintf("%d (%s)", len(killed), strings.Join(killed, "; ")))
	figure(t, "created → Ready, with those kills", time.Since(start))
	if manager.Runs()-runs != len(killed) {
		t.Errorf("the manager was started %d times for %d kills", manager.Runs()-runs, len(killed))
	}
	gotMgmt, gotPlane := inventory(t, ctx, p, tenantOf(t, ctx, p).Config)
	sameInventory(t, "management", refMgmt, gotMgmt)
	sameInventory(t, "plane", refPlane, gotPlane)

	// Teardown: the Cluster is held by CAPI's finalizer until the kill at DeletingCluster,
	// so every stage is seen waiting.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	infra := p.Status.InfrastructureNamespace
	releaseCluster := testkit.HoldCluster(t, ctx, k8s, p)
	start = time.Now()
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	tenant := tenantOf(t, ctx, p)
	killed = killAtEachPoint(t, 5*time.Minute, func() ([]string, bool) { return teardownPoints(ctx, p, tenant) }, func(stage string) {
		if stage == cpv1.DeletingClusterReason {
			releaseCluster()
		}
	})
	note(t, "teardown: kills", fmt.Sprintf("%d (%s)", len(killed), strings.Join(killed, "; ")))
	figure(t, "deleted → gone, with those kills", time.Since(start))
	if !slices.ContainsFunc(killed, func(k string) bool { return strings.Contains(k, cpv1.DeletingClusterReason) }) {
		t.Errorf("the teardown was never seen waiting on its Cluster: %v", killed)
	}
	checkNothingLeft(t, ctx, p, infra)
}

// teardownPoints names where a plane's teardown is: the stage it waits on (Reconciling's
// reason), and each step done that the test can see. done once the plane is gone.
func teardownPoints(ctx context.Context, p *cpv1.ComputePlane, tenant *devenv.Cluster) ([]string, bool) {
	got := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); apierrors.IsNotFound(err) {
		return nil, true
	} else if err != nil {
		return nil, false
	}
	var points []string
	if rec := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReconcilingCondition); rec != nil && rec.Reason != cpv1.DeletingReason {
		points = append(points, rec.Reason)
	}
	if apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: tenancy.ApplierSecretName(p)}, &corev1.Secret{})) {
		points = append(points, "applier kubeconfig Secret deleted")
	}
	if apierrors.IsNotFound(tenant.Client.Get(ctx, client.ObjectKey{Namespace: posture.ApplierNamespace, Name: posture.ApplierName}, &corev1.ServiceAccount{})) {
		points = append(points, "applier ServiceAccount removed from the plane")
	}
	sel := client.MatchingLabels{cpv1.PlaneUIDLabel: string(p.UID)}
	for _, k := range []struct{ what, kind string }{
		{"egress policies deleted", "CiliumNetworkPolicyList"}, {"add-on releases deleted", "HelmReleaseList"},
	} {
		list := &unstructured.UnstructuredList{}
		gv := map[string]string{"CiliumNetworkPolicyList": "cilium.io/v2", "HelmReleaseList": "helm.toolkit.fluxcd.io/v2"}[k.kind]
		list.SetAPIVersion(gv)
		list.SetKind(k.kind)
		if k8s.List(ctx, list, sel) == nil && len(list.Items) == 0 {
			points = append(points, k.what)
		}
	}
	return points, false
}

// checkNothingLeft is testkit.CheckNothingLeft, and the applier kubeconfig Secret (in
// the tenant namespace, which stays) is gone too.
func checkNothingLeft(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, infra string) {
	t.Helper()
	testkit.CheckNothingLeft(t, ctx, k8s, p, infra)
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: tenancy.ApplierSecretName(p)}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the applier kubeconfig Secret is left (err=%v)", err)
	}
}

// TestManagementAPIServerRestarted: the management apiserver crashes and is away for 10 s twice,
// once in the middle of provisioning and once with the plane Ready (the manager loses
// its lease each time and is restarted). The plane converges to exactly what a plane
// that met no fault has.
func TestManagementAPIServerRestarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ref := newPlane(t, ctx)
	waitFor(t, 2*time.Minute, readyIs(ctx, ref, metav1.ConditionTrue))
	refMgmt, refPlane := inventory(t, ctx, ref, tenantOf(t, ctx, ref).Config)

	p := newPlane(t, ctx)
	waitFor(t, time.Minute, func() error {
		if pts, _ := provisioningPoints(ctx, p); !slices.Contains(pts, "Cluster created") {
			return fmt.Errorf("not yet provisioning: %v", pts)
		}
		return nil
	})
	restartManagement(t, 10*time.Second)
	restarted := time.Now()
	waitFor(t, 3*time.Minute, readyIs(ctx, p, metav1.ConditionTrue))
	figure(t, "restarted mid-provisioning (10 s down) → Ready", time.Since(restarted))

	restartManagement(t, 10*time.Second)
	restarted = time.Now()
	waitFor(t, 2*time.Minute, readyIs(ctx, p, metav1.ConditionTrue))
	waitFor(t, 2*time.Minute, readyIs(ctx, ref, metav1.ConditionTrue))
	figure(t, "restarted with planes Ready (10 s down) → both seen Ready", time.Since(restarted))

	gotMgmt, gotPlane := inventory(t, ctx, p, tenantOf(t, ctx, p).Config)
	sameInventory(t, "management", refMgmt, gotMgmt)
	sameInventory(t, "plane", refPlane, gotPlane)
	// The reference plane met the second restart too.
	afterMgmt, afterPlane := inventory(t, ctx, ref, tenantOf(t, ctx, ref).Config)
	sameInventory(t, "management (reference after the restart)", refMgmt, afterMgmt)
	sameInventory(t, "plane (reference after the restart)", refPlane, afterPlane)
}

func restartManagement(t *testing.T, down time.Duration) {
	t.Helper()
	if err := mgmt.CrashAPIServer(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(down)
	if err := mgmt.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
}
