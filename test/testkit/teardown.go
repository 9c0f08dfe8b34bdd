package testkit

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
)

// HoldCluster puts Cluster API's finalizer on the plane's Cluster, as Cluster API's own
// controller would (none runs in tests), so a test can look at both sides while the
// teardown waits for it; the returned func releases it.
func HoldCluster(tb testing.TB, ctx context.Context, c client.Client, p *cpv1.ComputePlane) func() {
	tb.Helper()
	cluster := &clusterv1.Cluster{}
	key := client.ObjectKey{Namespace: p.Status.InfrastructureNamespace, Name: render.ClusterName(p)}
	if err := c.Get(ctx, key, cluster); err != nil {
		tb.Fatal(err)
	}
	patch := client.MergeFrom(cluster.DeepCopy())
	controllerutil.AddFinalizer(cluster, clusterv1.ClusterFinalizer)
	if err := c.Patch(ctx, cluster, patch); err != nil {
		tb.Fatal(err)
	}
	return func() {
		if err := c.Get(ctx, key, cluster); err != nil {
			tb.Fatal(err)
		}
		patch := client.MergeFrom(cluster.DeepCopy())
		controllerutil.RemoveFinalizer(cluster, clusterv1.ClusterFinalizer)
		if err := c.Patch(ctx, cluster, patch); err != nil {
			tb.Fatal(err)
		}
	}
}

// CheckNothingLeft lists every kind the operator creates on the management cluster: none
// of the plane's (by its UID label) may be left, and its infrastructure namespace must be
// gone or going.
func CheckNothingLeft(tb testing.TB, ctx context.Context, c client.Client, p *cpv1.ComputePlane, infra string) {
	tb.Helper()
	sel := client.MatchingLabels{cpv1.PlaneUIDLabel: string(p.UID)}
	for _, gvk := range []schema.GroupVersionKind{
		clusterv1.GroupVersion.WithKind("ClusterList"),
		clusterv1.GroupVersion.WithKind("MachineDeploymentList"),
		{Group: render.ControlPlaneGroup, Version: "v1alpha2", Kind: "KamajiControlPlaneList"},
		{Group: render.InfrastructureGroup, Version: "v1alpha1", Kind: "KubevirtClusterList"},
		{Group: render.InfrastructureGroup, Version: "v1alpha1", Kind: "KubevirtMachineTemplateList"},
		{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfigTemplateList"},
		clusterv1.GroupVersion.WithKind("MachineHealthCheckList"),
		// The cluster-autoscaler of a plane whose groups autoscale.
		{Group: "apps", Version: "v1", Kind: "DeploymentList"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBindingList"},
		{Version: "v1", Kind: "ServiceAccountList"},
		{Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmReleaseList"},
		{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicyList"},
		{Version: "v1", Kind: "SecretList"},
	} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		if err := c.List(ctx, list, sel); err != nil {
			tb.Fatal(err)
		}
		for _, o := range list.Items {
			tb.Errorf("left behind: %s %s/%s", gvk.Kind, o.GetNamespace(), o.GetName())
		}
	}
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, types.NamespacedName{Name: infra}, ns); err == nil && ns.DeletionTimestamp.IsZero() {
		tb.Errorf("the infrastructure namespace %s is not being deleted", infra)
	}
}
