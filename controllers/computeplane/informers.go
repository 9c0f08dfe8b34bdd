package computeplane

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

// CacheObjects are what the ComputePlane controller needs of the manager's informers,
// each scoped to what it reads (controllers.CacheOptions says why, kind by kind):
// of what the operator creates only what carries its managed-by label, the opted-in
// Services, MachineSets' template references, TenantControlPlanes' endpoint, version and
// admin kubeconfig Secret, and the contentless kinds' identity alone.
func CacheObjects() map[client.Object]cache.ByObject {
	optedIn, err := labels.NewRequirement(cpv1.ServiceAccessLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key
	}
	ours := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{cpv1.ManagedByLabel: cpv1.ManagedByValue})}
	oursContentless := cache.ByObject{Label: ours.Label, Transform: contentless}
	byObject := map[client.Object]cache.ByObject{
		&corev1.Service{}:                    {Label: labels.NewSelector().Add(*optedIn)},
		&clusterv1.Cluster{}:                 ours,
		&clusterv1.MachineDeployment{}:       ours,
		&clusterv1.MachineSet{}:              {Transform: machineSetRefs},
		&kamajiv1alpha1.TenantControlPlane{}: {Transform: controlPlaneStatus},
		&bootstrapv1.KubeadmConfigTemplate{}: oursContentless,
		&ciliumv2.CiliumNetworkPolicy{}:      oursContentless,
		// A node group's health check (autoscaler.go). The cluster-autoscaler's
		// Deployment, ServiceAccount and RoleBinding have no informer: it would need the
		// right to list and watch them cluster-wide.
		&clusterv1.MachineHealthCheck{}: ours,
	}
	for _, gvk := range unstructuredKinds() {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		byObject[u] = oursContentless
	}
	return byObject
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

// ListOwned lists the objects of kind gvk (a ...List kind) in ns that sel matches,
// from the manager's cache (ownedList).
func ListOwned(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, ns string, sel client.MatchingLabels) ([]client.Object, error) {
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
		// In the add-on cache (addonIdentity).
		helmv2.GroupVersion.WithKind(helmv2.HelmReleaseKind): true,
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
