package controllers_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
)

type planeOpt func(*cpv1.ComputePlane)

func newPlane(ns, name, class string, opts ...planeOpt) *cpv1.ComputePlane {
	p := &cpv1.ComputePlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       cpv1.ComputePlaneSpec{ClassName: class},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withGroup(name string, g cpv1.NodeGroup) planeOpt {
	return func(p *cpv1.ComputePlane) {
		if p.Spec.NodeGroups == nil {
			p.Spec.NodeGroups = map[string]cpv1.NodeGroup{}
		}
		p.Spec.NodeGroups[name] = g
	}
}

func withService(name string, ports ...int32) planeOpt {
	return func(p *cpv1.ComputePlane) {
		sa := cpv1.ServiceAccess{Name: name}
		for _, port := range ports {
			sa.Ports = append(sa.Ports, cpv1.ServicePort{Port: port, Protocol: "TCP"})
		}
		p.Spec.ServiceAccess = append(p.Spec.ServiceAccess, sa)
	}
}

type classOpt func(*cpv1.ComputePlaneClass)

func newClass(name string, opts ...classOpt) *cpv1.ComputePlaneClass {
	c := &cpv1.ComputePlaneClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cpv1.ComputePlaneClassSpec{
			AllowedNamespaces: &metav1.LabelSelector{}, // every namespace; tests of the selector set their own
			KubernetesVersion: "v1.33.4",
			Addons: []cpv1.SystemAddon{{
				Name: "cilium", Role: cpv1.AddonRoleCNI, TargetNamespace: "kube-system",
				ChartRef: cpv1.AddonChartRef{Kind: "OCIRepository", Name: "cilium", Namespace: "cozy-system"},
			}},
			PodSecurity: cpv1.PodSecurityProfile{ExemptNamespaces: []string{"kube-system"}},
			NodeGroups:  cpv1.NodeGroupLimits{MaxGroups: 4, MaxReplicas: 5, InstanceTypes: []string{"u1.medium"}},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// tenantNamespace creates a namespace with a random suffix for one test.
func tenantNamespace(t *testing.T, ctx context.Context) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-" + utilrand.String(6)}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// planeWithClass creates the class, a tenant namespace and a plane "plane" of that class
// in it.
func planeWithClass(t *testing.T, ctx context.Context, class *cpv1.ComputePlaneClass, opts ...planeOpt) *cpv1.ComputePlane {
	t.Helper()
	if err := k8s.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	p := newPlane(tenantNamespace(t, ctx), "plane", class.Name, opts...)
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// requestReconcile sets the reconcile.fluxcd.io/requestedAt annotation, as a person would
// with kubectl annotate.
func requestReconcile(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, stamp string) {
	t.Helper()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, "reconcile.fluxcd.io/requestedAt", stamp)
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
}

// newTCP is a TenantControlPlane as Kamaji's CAPI provider creates it for a plane.
func newTCP(ns, name string) *kamajiv1alpha1.TenantControlPlane {
	return &kamajiv1alpha1.TenantControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kamajiv1alpha1.TenantControlPlaneSpec{
			ControlPlane: kamajiv1alpha1.ControlPlane{Service: kamajiv1alpha1.ServiceSpec{ServiceType: "ClusterIP"}},
			Kubernetes:   kamajiv1alpha1.KubernetesSpec{Version: "v1.33.4", Kubelet: kamajiv1alpha1.KubeletSpec{CGroupFS: "systemd"}},
		}}
}

// createPlane creates a plane of a class that may not exist, in a new namespace.
func createPlane(t *testing.T, ctx context.Context, className string) *cpv1.ComputePlane {
	t.Helper()
	p := newPlane(tenantNamespace(t, ctx), "plane", className)
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// infraOf is the plane's dedicated infrastructure namespace for a class with the
// default prefix (the plane must come from the API: the name carries its UID).
func infraOf(p *cpv1.ComputePlane) string {
	if p.UID == "" {
		panic("infraOf needs a plane read from the API")
	}
	return render.InfrastructureNamespace(p, &cpv1.ComputePlaneClass{Spec: cpv1.ComputePlaneClassSpec{
		Infrastructure: cpv1.InfrastructureProfile{Placement: cpv1.DedicatedNamespace, NamespacePrefix: "cp-"}}})
}

// planeOfLabels is the plane an operator-made object's labels name.
func planeOfLabels(l map[string]string) *cpv1.ComputePlane {
	return &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: l[cpv1.PlaneNamespaceLabel], Name: l[cpv1.PlaneNameLabel],
		UID: types.UID(l[cpv1.PlaneUIDLabel])}}
}

// fakeKubeconfig is a kubeconfig shaped like Kamaji's (inline CA, client certificate and
// key of "kubernetes-super-admin") for server; mutUser edits the user entry and flags
// are set true on the cluster entry. Nothing answers for it: it is for admission of the
// credential, not for use.
func fakeKubeconfig(t *testing.T, server string, mutUser func(map[string]any), clusterFlags ...string) []byte {
	t.Helper()
	certPEM, keyPEM, err := devenv.ClientCertificate("kubernetes-super-admin")
	if err != nil {
		t.Fatal(err)
	}
	user := map[string]any{
		"client-certificate-data": base64.StdEncoding.EncodeToString(certPEM),
		"client-key-data":         base64.StdEncoding.EncodeToString(keyPEM),
	}
	if mutUser != nil {
		mutUser(user)
	}
	cluster := map[string]any{"server": server, "certificate-authority-data": base64.StdEncoding.EncodeToString(certPEM)}
	for _, f := range clusterFlags {
		cluster[f] = true
	}
	cfg := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "admin@plane",
		"clusters": []any{map[string]any{"name": "plane", "cluster": cluster}},
		"users":    []any{map[string]any{"name": "admin", "user": user}},
		"contexts": []any{map[string]any{"name": "admin@plane", "context": map[string]any{"cluster": "plane", "user": "admin"}}},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// planeGone checks that the plane no longer exists (its teardown finished).
func planeGone(ctx context.Context, key client.ObjectKey) func() error {
	return func() error {
		if err := k8s.Get(ctx, key, &cpv1.ComputePlane{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("plane still present (err=%v)", err)
		}
		return nil
	}
}
