package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/controllers/render"
)

// managementKinds are the kinds the manager's informers hold (controllers.CacheOptions,
// addons.go): what the fleet's management objects weigh bounds what the caches can.
var managementKinds = []schema.GroupVersionKind{
	{Group: "computeplane.cozystack.io", Version: "v1alpha1", Kind: "ComputePlane"},
	{Version: "v1", Kind: "Namespace"},
	{Version: "v1", Kind: "Service"},
	{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"},
	{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeployment"},
	{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineSet"},
	schema.FromAPIVersionAndKind(render.KamajiAPIVersion, render.KamajiControlPlaneKind),
	{Group: "kamaji.clastix.io", Version: "v1alpha1", Kind: "TenantControlPlane"},
	{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1", Kind: "KubevirtCluster"},
	{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1", Kind: "KubevirtMachineTemplate"},
	{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfigTemplate"},
	{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"},
	{Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmRelease"},
}

// objectWeights lists, per kind, how many objects the management cluster holds and
// their JSON size without managed fields (the caches drop those): the informers'
// share of the heap is a multiple of it.
func objectWeights(ctx context.Context, c client.Client) string {
	var b strings.Builder
	for _, gvk := range managementKinds {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.List(ctx, l); err != nil {
			fmt.Fprintf(&b, "  %-24s %v\n", gvk.Kind, err)
			continue
		}
		size := 0
		for i := range l.Items {
			l.Items[i].SetManagedFields(nil)
			raw, err := json.Marshal(l.Items[i].Object)
			if err != nil {
				continue
			}
			size += len(raw)
		}
		fmt.Fprintf(&b, "  %-24s %6d objects %8.1f KiB JSON\n", gvk.Kind, len(l.Items), float64(size)/1024)
	}
	return b.String()
}
