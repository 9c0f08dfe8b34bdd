package controllers

import (
	"context"
	"fmt"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
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
//     written back. The operator's add-on releases have a cache of their own (addons.go)
//     and the management cluster's other releases are cached by neither.
//
// No cached object keeps its managed fields. Every manager running the controllers
// uses these.
func CacheOptions() cache.Options {
	optedIn, err := labels.NewRequirement(cpv1.ServiceAccessLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key
	}
	ours := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{render.ManagedByLabel: render.ManagedByValue})}
	oursContentless := cache.ByObject{Label: ours.Label, Transform: contentless}
	byObject := map[client.Object]cache.ByObject{
		&corev1.Service{}:                    {Label: labels.NewSelector().Add(*optedIn)},
		&clusterv1.Cluster{}:                 ours,
		&clusterv1.MachineDeployment{}:       ours,
		&clusterv1.MachineSet{}:              {Transform: machineSetRefs},
		&kamajiv1alpha1.TenantControlPlane{}: {Transform: controlPlaneStatus},
		&bootstrapv1.KubeadmConfigTemplate{}: oursContentless,
		&ciliumv2.CiliumNetworkPolicy{}:      oursContentless,
		// A node group's health check (nodes_heal_scale.go). The cluster-autoscaler's
		// Deployment, ServiceAccount and RoleBinding have no informer: it would need the
		// right to list and watch them cluster-wide.
		&clusterv1.MachineHealthCheck{}: ours,
		&helmv2.HelmRelease{}: {Label: labels.SelectorFromSet(labels.Set{cpv1.PlacementLabel: cpv1.PlacementLabelValue}),
			Transform: placementRelease},
	}
	for _, gvk := range unstructuredKinds() {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		byObject[u] = oursContentless
	}
	return cache.Options{ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields()}
}

// ownedList is an empty list of kind gvk (a ...List kind) in the form the manager's
// cache already holds that kind: typed where the scheme knows it, else unstructured. A
// metadata-only list would start a second informer of the kind: a second watch and a
// second copy of every object's metadata, for reads the first serves as well.
func ownedList(s *runtime.Scheme, gvk schema.GroupVersionKind) (client.ObjectList, error) {
	if s.Recognizes(gvk) {
		o, err := s.New(gvk)
		if err != nil {
			return nil, err
		}
		if l, ok := o.(client.ObjectList); ok {
			return l, nil
		}
		return nil, fmt.Errorf("%s is not a list kind", gvk)
	}
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk)
	return l, nil
}

// listOwned lists the objects of kind gvk (a ...List kind) in ns that sel matches,
// from the manager's cache (ownedList).
func listOwned(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, ns string, sel client.MatchingLabels) ([]client.Object, error) {
	list, err := ownedList(c.Scheme(), gvk)
	if err != nil {
		return nil, err
	}
	if err := c.List(ctx, list, client.InNamespace(ns), sel); err != nil {
		return nil, err
	}
	items, err := apimeta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(items))
	for _, o := range items {
		obj, ok := o.(client.Object)
		if !ok {
			return nil, fmt.Errorf("%s holds a %T", gvk, o)
		}
		out = append(out, obj)
	}
	return out, nil
}

// unstructuredKinds are the kinds the operator creates without Go types for them.
func unstructuredKinds() []schema.GroupVersionKind {
	return []schema.GroupVersionKind{
		schema.FromAPIVersionAndKind(render.KamajiAPIVersion, render.KamajiControlPlaneKind),
		{Group: render.InfrastructureGroup, Version: "v1alpha1", Kind: render.KubevirtClusterKind},
		{Group: render.InfrastructureGroup, Version: "v1alpha1", Kind: render.KubevirtTemplateKind},
	}
}

// ContentlessKinds are the kinds the manager's cache holds without their content
// (contentless): the comparisons of them read a version they do not remember from the
// API server (ssa.Comparisons.Fresh).
func ContentlessKinds() map[schema.GroupVersionKind]bool {
	kinds := map[schema.GroupVersionKind]bool{
		bootstrapv1.GroupVersion.WithKind("KubeadmConfigTemplate"):  true,
		ciliumv2.SchemeGroupVersion.WithKind("CiliumNetworkPolicy"): true,
	}
	for _, gvk := range unstructuredKinds() {
		kinds[gvk] = true
	}
	return kinds
}

// contentless keeps of an object the operator applies and only compares with what it
// wants (the KamajiControlPlane, KubevirtCluster and KubevirtMachineTemplate,
// unstructured; the KubeadmConfigTemplates and Cilium policies) its identity: who it is,
// its version, its labels, whether it is going. Its spec is read from the API server
// when a comparison meets a version it does not remember; its status (Kamaji's replica
// counts and conditions, what Cilium agents write into a policy) is never read, so the
// cache keeps no copy of either (docs/benchmarks.md says what that saves).
func contentless(obj any) (any, error) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		out := &unstructured.Unstructured{}
		out.SetAPIVersion(o.GetAPIVersion())
		out.SetKind(o.GetKind())
		out.SetNamespace(o.GetNamespace())
		out.SetName(o.GetName())
		out.SetUID(o.GetUID())
		out.SetResourceVersion(o.GetResourceVersion())
		out.SetGeneration(o.GetGeneration())
		out.SetLabels(o.GetLabels())
		out.SetDeletionTimestamp(o.GetDeletionTimestamp())
		return out, nil
	case *ciliumv2.CiliumNetworkPolicy:
		return &ciliumv2.CiliumNetworkPolicy{TypeMeta: o.TypeMeta, ObjectMeta: identity(o.ObjectMeta)}, nil
	case *bootstrapv1.KubeadmConfigTemplate:
		return &bootstrapv1.KubeadmConfigTemplate{TypeMeta: o.TypeMeta, ObjectMeta: identity(o.ObjectMeta)}, nil
	}
	return obj, nil
}

// identity is what a trimmed cached object keeps of its metadata: who it is, its
// version, its labels, and whether it is going.
func identity(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, Labels: m.Labels, DeletionTimestamp: m.DeletionTimestamp}
}

// placementRelease keeps of a placement release what the placement controller reads:
// identity, labels, finalizers, its own annotation, the spec but its values (routing,
// sources, valuesFrom and suspend are judged), status.storageNamespace.
func placementRelease(obj any) (any, error) {
	hr, ok := obj.(*helmv2.HelmRelease)
	if !ok {
		return obj, nil
	}
	out := &helmv2.HelmRelease{TypeMeta: hr.TypeMeta, Spec: hr.Spec}
	out.ObjectMeta = identity(hr.ObjectMeta)
	out.Finalizers, out.CreationTimestamp = hr.Finalizers, hr.CreationTimestamp
	if v, ok := hr.Annotations[cpv1.SuspendedAnnotation]; ok {
		out.Annotations = map[string]string{cpv1.SuspendedAnnotation: v}
	}
	out.Spec.Values = nil
	out.Status.StorageNamespace = hr.Status.StorageNamespace
	return out, nil
}

// machineSetRefs keeps of a MachineSet what pruning old node group templates reads.
func machineSetRefs(obj any) (any, error) {
	ms, ok := obj.(*clusterv1.MachineSet)
	if !ok {
		return obj, nil
	}
	out := &clusterv1.MachineSet{TypeMeta: ms.TypeMeta, ObjectMeta: identity(ms.ObjectMeta)}
	out.Spec.Template.Spec.InfrastructureRef = ms.Spec.Template.Spec.InfrastructureRef
	out.Spec.Template.Spec.Bootstrap.ConfigRef = ms.Spec.Template.Spec.Bootstrap.ConfigRef
	return out, nil
}

// controlPlaneStatus keeps of a TenantControlPlane what observing the providers reads.
func controlPlaneStatus(obj any) (any, error) {
	tcp, ok := obj.(*kamajiv1alpha1.TenantControlPlane)
	if !ok {
		return obj, nil
	}
	out := &kamajiv1alpha1.TenantControlPlane{TypeMeta: tcp.TypeMeta, ObjectMeta: identity(tcp.ObjectMeta)}
	out.Spec.NetworkProfile.Port = tcp.Spec.NetworkProfile.Port
	out.Status.ControlPlaneEndpoint = tcp.Status.ControlPlaneEndpoint
	out.Status.Kubernetes.Version = tcp.Status.Kubernetes.Version
	out.Status.KubeConfig.Admin.SecretName = tcp.Status.KubeConfig.Admin.SecretName
	return out, nil
}

// ClientOptions make the manager's client read the kinds the operator has no Go types
// for (KamajiControlPlane, KubevirtCluster, KubevirtMachineTemplate: unstructured) from
// its informers, as it reads the typed ones: a pass over a plane with nothing to change
// then asks the management API server for nothing but the credential Secrets, which
// are never cached.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{Unstructured: true}}
}
