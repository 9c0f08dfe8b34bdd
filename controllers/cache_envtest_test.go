package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/computeplane"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/netpol"
)

// TestCachesHoldOnlyTheOperatorsObjects: another Cluster API user's Clusters, control
// planes and Cilium policies on the management cluster are not in the operator's
// informers (its memory follows its planes); the operator's own are, the control plane
// and policy as their identity alone; a MachineSet is cached with only what pruning
// reads, a TenantControlPlane with only what observing the providers reads.
func TestCachesHoldOnlyTheOperatorsObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenantNamespace(t, ctx)
	ours := map[string]string{cpv1.ManagedByLabel: cpv1.ManagedByValue}
	kcp := func(name string, l map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"version": "v1.33.4"}}}
		u.SetAPIVersion(render.KamajiAPIVersion)
		u.SetKind(render.KamajiControlPlaneKind)
		u.SetNamespace(ns)
		u.SetName(name)
		u.SetLabels(l)
		return u
	}
	for _, o := range []client.Object{
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "theirs"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}},
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ours", Labels: ours}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}},
		&ciliumv2.CiliumNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "theirs"}},
		ourDeny(ns, ours),
		kcp("theirs", nil), kcp("ours", ours),
		&clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "set", Labels: map[string]string{cpv1.ClusterNameLabel: "c"}},
			Spec: clusterv1.MachineSetSpec{ClusterName: "c", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"set": "a"}},
				Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"set": "a"}},
					Spec: clusterv1.MachineSpec{ClusterName: "c",
						Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfigTemplate", Name: "boot"}},
						InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: render.InfrastructureGroup, Kind: render.KubevirtTemplateKind, Name: "infra"}}}}},
	} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// What the providers and Cilium report on the operator's objects, which it never reads.
	ourKCP := kcp("ours", nil)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(ourKCP), ourKCP); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedMap(ourKCP.Object, map[string]any{"ready": true, "version": "v1.33.4"}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Status().Update(ctx, ourKCP); err != nil {
		t.Fatal(err)
	}
	ourPolicy := &ciliumv2.CiliumNetworkPolicy{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ours"}, ourPolicy); err != nil {
		t.Fatal(err)
	}
	ourPolicy.Status.Conditions = []ciliumv2.NetworkPolicyCondition{{Type: ciliumv2.PolicyConditionValid, Status: "True"}}
	if err := k8s.Status().Update(ctx, ourPolicy); err != nil {
		t.Fatal(err)
	}
	tcp := newTCP(ns, "tcp")
	tcp.Spec.NetworkProfile.Port = 7443
	if err := k8s.Create(ctx, tcp); err != nil {
		t.Fatal(err)
	}
	ready := kamajiv1alpha1.VersionReady
	tcp.Status.ControlPlaneEndpoint = "10.0.0.1:7443"
	tcp.Status.Kubernetes.Version = kamajiv1alpha1.KubernetesVersion{Version: "v1.33.4", Status: &ready}
	tcp.Status.KubeConfig.Admin = kamajiv1alpha1.KubeconfigStatus{SecretName: "tcp-admin-kubeconfig", Checksum: "c1"}
	tcp.Status.Certificates.CA = kamajiv1alpha1.CertificatePrivateKeyPairStatus{SecretName: "tcp-ca", Checksum: "c2"}
	if err := k8s.Status().Update(ctx, tcp); err != nil {
		t.Fatal(err)
	}
	names := func(l client.ObjectList) ([]string, error) {
		if err := reconciler.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		var out []string
		items, err := metaItems(l)
		for _, o := range items {
			out = append(out, o.GetName())
		}
		return out, err
	}
	kcps := &unstructured.UnstructuredList{}
	kcps.SetAPIVersion(render.KamajiAPIVersion)
	kcps.SetKind(render.KamajiControlPlaneKind + "List")
	for _, l := range []client.ObjectList{&clusterv1.ClusterList{}, &ciliumv2.CiliumNetworkPolicyList{}, kcps} {
		eventually(t, settle, func() error {
			got, err := names(l)
			if err != nil {
				return err
			}
			if fmt.Sprint(got) != "[ours]" {
				return fmt.Errorf("the operator's cache holds %T %v, want [ours]", l, got)
			}
			return nil
		})
	}
	// The teardown and the node group pruning list what they delete from the same
	// scoped informers: never another user's object, whatever the selector they pass.
	for _, gvk := range computeplane.LeftoverKinds {
		eventually(t, settle, func() error {
			items, err := computeplane.ListOwned(ctx, reconciler.Client, gvk, ns, nil)
			if err != nil {
				return err
			}
			var got []string
			for _, o := range items {
				got = append(got, o.GetName())
			}
			want := "[]" // of these kinds the test made only policies and control planes
			if gvk.Kind == "CiliumNetworkPolicyList" || gvk.Kind == render.KamajiControlPlaneKind+"List" {
				want = "[ours]"
			}
			if fmt.Sprint(got) != want {
				return fmt.Errorf("listing %s for the teardown gives %v, want %s", gvk.Kind, got, want)
			}
			return nil
		})
	}
	eventually(t, settle, func() error {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(ourKCP.GroupVersionKind())
		if err := reconciler.Client.Get(ctx, client.ObjectKeyFromObject(ourKCP), got); err != nil {
			return err
		}
		// Identity only: the comparisons read a version they do not remember from the
		// API server (ssa.Comparisons.Fresh).
		if _, ok := got.Object["spec"]; ok || got.GetUID() != ourKCP.GetUID() || got.GetResourceVersion() == "" || got.GetLabels()[cpv1.ManagedByLabel] == "" {
			return fmt.Errorf("the cached KamajiControlPlane is not its identity alone: %v", got.Object)
		}
		if _, ok := got.Object["status"]; ok || len(got.GetManagedFields()) > 0 {
			return fmt.Errorf("the cached KamajiControlPlane keeps its status or managed fields: %v", got.Object)
		}
		policy := &ciliumv2.CiliumNetworkPolicy{}
		if err := reconciler.Client.Get(ctx, client.ObjectKeyFromObject(ourPolicy), policy); err != nil {
			return err
		}
		if policy.Spec != nil || policy.Specs != nil || len(policy.Status.Conditions) > 0 || len(policy.ManagedFields) > 0 || policy.UID != ourPolicy.UID {
			return fmt.Errorf("the cached CiliumNetworkPolicy is not its identity alone: %+v %+v", policy.Spec, policy.Status)
		}
		return nil
	})
	eventually(t, settle, func() error {
		ms := &clusterv1.MachineSet{}
		if err := reconciler.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "set"}, ms); err != nil {
			return err
		}
		if ms.Spec.ClusterName != "" || ms.Spec.Template.Spec.InfrastructureRef.Name != "infra" ||
			ms.Spec.Template.Spec.Bootstrap.ConfigRef.Name != "boot" || ms.Labels[cpv1.ClusterNameLabel] != "c" {
			return fmt.Errorf("the cached MachineSet holds %+v, want its labels and template references only", ms.Spec)
		}
		if len(ms.ManagedFields) > 0 {
			return fmt.Errorf("the cached MachineSet keeps its managed fields")
		}
		return nil
	})
	eventually(t, settle, func() error {
		got := &kamajiv1alpha1.TenantControlPlane{}
		if err := reconciler.Client.Get(ctx, client.ObjectKeyFromObject(tcp), got); err != nil {
			return err
		}
		st := got.Status
		if st.ControlPlaneEndpoint != "10.0.0.1:7443" || st.KubeConfig.Admin.SecretName != "tcp-admin-kubeconfig" ||
			st.Kubernetes.Version.Version != "v1.33.4" || st.Kubernetes.Version.Status == nil || got.Spec.NetworkProfile.Port != 7443 {
			return fmt.Errorf("the cached TenantControlPlane lost what the operator reads: %+v, port %d", st, got.Spec.NetworkProfile.Port)
		}
		if st.Certificates.CA.SecretName != "" || st.KubeConfig.Admin.Checksum != "" || got.Spec.Kubernetes.Version != "" ||
			got.Spec.ControlPlane.Service.ServiceType != "" || len(got.ManagedFields) > 0 {
			return fmt.Errorf("the cached TenantControlPlane keeps more than the operator reads: %+v", got)
		}
		return nil
	})
}

// TestCachesHoldOnlyTheOperatorsReleases: of the HelmReleases the operator caches the
// placement releases (the manager's cache) and its own add-on releases (their own
// cache), not the others of the management cluster.
func TestCachesHoldOnlyTheOperatorsReleases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("cache-"+rand.String(6)))
	release := func(name string, l map[string]string) *helmv2.HelmRelease {
		return &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: name, Labels: l},
			Spec: helmv2.HelmReleaseSpec{Interval: metav1.Duration{Duration: time.Minute},
				ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "app"}}}
	}
	// Created in this order, so a cache that holds the last one has seen the others.
	for _, o := range []client.Object{
		release("theirs", nil),
		release("addon", map[string]string{cpv1.ManagedByLabel: cpv1.ManagedByValue}),
		placementRelease(p.Namespace, "app", func(hr *helmv2.HelmRelease) {
			hr.Spec.Values = &apiextensionsv1.JSON{Raw: []byte(`{"blob":"` + strings.Repeat("x", 64<<10) + `"}`)}
			hr.Annotations = map[string]string{"bulk": strings.Repeat("y", 64<<10)}
		}),
	} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		if o.GetName() != "app" { // the placement release goes with its plane
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
		}
	}
	for _, c := range []struct {
		cache client.Reader
		want  string
	}{{reconciler.Client, "[app]"}, {reconciler.Addons, "[addon]"}} {
		eventually(t, settle, func() error {
			var l helmv2.HelmReleaseList
			if err := c.cache.List(ctx, &l, client.InNamespace(p.Namespace)); err != nil {
				return err
			}
			var got []string
			for _, hr := range l.Items {
				got = append(got, hr.Name)
			}
			if fmt.Sprint(got) != c.want {
				return fmt.Errorf("the cache holds HelmReleases %v, want %s", got, c.want)
			}
			return nil
		})
	}
	// What a tenant may make large is not kept: the values, foreign annotations.
	cached := &helmv2.HelmRelease{}
	if err := reconciler.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: "app"}, cached); err != nil {
		t.Fatal(err)
	}
	if cached.Spec.Values != nil || len(cached.Annotations) > 0 || len(cached.ManagedFields) > 0 {
		t.Errorf("the cached placement release keeps its values (%v), annotations (%d) or managed fields",
			cached.Spec.Values != nil, len(cached.Annotations))
	}
	if cached.Spec.KubeConfig == nil || cached.Spec.ServiceAccountName == "" || len(cached.Finalizers) == 0 {
		t.Errorf("the cached placement release lost what the placement controller reads: %+v %v", cached.Spec, cached.Finalizers)
	}
}

func metaItems(l client.ObjectList) ([]metav1.Object, error) {
	var out []metav1.Object
	err := apimeta.EachListItem(l, func(o runtime.Object) error {
		m, err := apimeta.Accessor(o)
		out = append(out, m)
		return err
	})
	return out, err
}

// ourDeny is a default deny (a policy with a spec) named "ours", with labels.
func ourDeny(ns string, labels map[string]string) *ciliumv2.CiliumNetworkPolicy {
	p := netpol.DefaultDeny(ns, labels)
	p.Name = "ours"
	return p
}
