package controllers

import (
	"maps"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/controllers/computeplane"
	"github.com/cozystack/computeplane/controllers/placement"
)

// CacheOptions scope the manager's informers to what the controllers read, so the
// operator's memory follows its planes, not the size of the management cluster:
//   - of what the operator creates (Clusters, MachineDeployments, the control plane and
//     infrastructure objects, templates, Cilium policies) only what carries its
//     app.kubernetes.io/managed-by label; another Cluster API user's objects are not
//     cached (the operator finds its own by their labels, and a foreign object of the
//     same name in a plane's namespace is no more adopted than before: server-side apply
//     takes back the operator's fields whether or not the cache saw it);
//   - of the Services only those that opted in to a grant (the grants read nothing else);
//   - of the MachineSets (Cluster API creates them, with its labels, not the operator's)
//     only their labels and the two template references the operator reads;
//   - of the TenantControlPlanes (Kamaji's CAPI provider creates them, copying the
//     KamajiControlPlane's labels; the operator does not rely on that copy, so all are
//     cached) only the endpoint, the version, the admin
//     kubeconfig Secret's name and the port: not Kamaji's certificate, kubeadm, storage
//     and add-on status or the deployment spec. The operator never writes them;
//   - of the KamajiControlPlanes, KubevirtClusters, KubevirtMachineTemplates,
//     KubeadmConfigTemplates and CiliumNetworkPolicies (the operator's, by the label)
//     their identity only (contentless): the operator only compares them with what it
//     wants, lists them by label and deletes them by name. A comparison remembers the
//     (uid, resourceVersion) it last found to match; a version it does not remember it
//     reads in full from the API server (ssa.Comparisons.Fresh), so a plane at rest
//     costs no read, and the cache no copy of their specs;
//   - of the HelmReleases only the placement releases, without what the placement
//     controller never reads (spec.values, which a tenant may fill with a MiB per
//     release, status but storageNamespace, annotations but the operator's); its merge
//     patches are diffs of two copies of the cached object, so nothing dropped is ever
//     written back. The operator's add-on releases have a cache of their own (computeplane/addons.go)
//     and the management cluster's other releases are cached by neither.
//
// No cached object keeps its managed fields. Every manager running the controllers
// uses these.
func CacheOptions() cache.Options {
	byObject := computeplane.CacheObjects()
	maps.Copy(byObject, placement.CacheObjects())
	return cache.Options{ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields()}
}

// ClientOptions are the manager's client options the controllers need
// (computeplane.ClientOptions).
func ClientOptions() client.Options { return computeplane.ClientOptions() }
