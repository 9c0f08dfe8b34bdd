package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
)

func gpuClass(name string) *cpv1.ComputePlaneClass {
	return newClass(name, func(c *cpv1.ComputePlaneClass) {
		c.Spec.NodeGroups.MaxCPU = ptr.To(resource.MustParse("16"))
		c.Spec.NodeGroups.GPUs = []cpv1.GPULimit{{DeviceName: "nvidia.com/A10", MaxPerNode: 2}}
	})
}

func kmtList(ctx context.Context, t *testing.T, ns string) []unstructured.Unstructured {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion(render.KubevirtAPIVersion)
	l.SetKind(render.KubevirtTemplateKind + "List")
	if err := k8s.List(ctx, l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestProvisioningRendersTheGraph applies 0, 1 and several node groups (instance type,
// resources, GPUs) through the real upstream CRD schemas and checks what landed where.
func TestProvisioningRendersTheGraph(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := gpuClass("render-" + rand.String(6))
	if err := k8s.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	cases := map[string]map[string]cpv1.NodeGroup{
		"none": nil,
		"one":  {"workers": medium},
		"several": {
			"workers": medium,
			"gpu": {MinReplicas: 0, MaxReplicas: 2, Resources: &cpv1.NodeResources{CPU: resource.MustParse("8"), Memory: resource.MustParse("32Gi")},
				GPUs: []cpv1.NodeGPU{{DeviceName: "nvidia.com/A10", Count: 2}}, Roles: []string{"gpu"}},
			"fixed": {MinReplicas: 2, MaxReplicas: 2, InstanceType: "u1.medium"},
		},
	}
	for name, groups := range cases {
		t.Run(name, func(t *testing.T) {
			ns := tenantNamespace(t, ctx)
			p := newPlane(ns, "plane", class.Name)
			p.Spec.NodeGroups = groups
			if err := k8s.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			key := client.ObjectKeyFromObject(p)
			eventually(t, settle, conditionIs(ctx, key, cpv1.ProvisionedCondition, metav1.ConditionFalse, cpv1.WaitingForInfrastructureReason))
			infra := infraOf(p)
			got := &cpv1.ComputePlane{}
			if err := k8s.Get(ctx, key, got); err != nil {
				t.Fatal(err)
			}
			if got.Status.InfrastructureNamespace != infra {
				t.Errorf("status.infrastructureNamespace = %q, want %q", got.Status.InfrastructureNamespace, infra)
			}
			nsObj := &corev1.Namespace{}
			if err := k8s.Get(ctx, client.ObjectKey{Name: infra}, nsObj); err != nil {
				t.Fatal(err)
			}
			if nsObj.Labels[cpv1.PlaneNameLabel] != "plane" || nsObj.Labels[cpv1.PlaneNamespaceLabel] != ns || nsObj.Labels[cpv1.PlaneUIDLabel] != string(p.UID) {
				t.Errorf("infrastructure namespace labels = %v", nsObj.Labels)
			}
			cluster := &clusterv1.Cluster{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: "plane"}, cluster); err != nil {
				t.Fatalf("no Cluster: %v", err)
			}
			kcp := &unstructured.Unstructured{}
			kcp.SetAPIVersion(render.KamajiAPIVersion)
			kcp.SetKind(render.KamajiControlPlaneKind)
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: "plane"}, kcp); err != nil {
				t.Fatalf("no KamajiControlPlane: %v", err)
			}
			if v, _, _ := unstructured.NestedString(kcp.Object, "spec", "version"); v != class.Spec.KubernetesVersion {
				t.Errorf("KamajiControlPlane version = %q", v)
			}
			var mds clusterv1.MachineDeploymentList
			if err := k8s.List(ctx, &mds, client.InNamespace(infra)); err != nil {
				t.Fatal(err)
			}
			if len(mds.Items) != len(groups) || len(kmtList(ctx, t, infra)) != len(groups) {
				t.Errorf("%d MachineDeployments and %d templates for %d node groups", len(mds.Items), len(kmtList(ctx, t, infra)), len(groups))
			}
			var kcts bootstrapv1.KubeadmConfigTemplateList
			if err := k8s.List(ctx, &kcts, client.InNamespace(infra)); err != nil || len(kcts.Items) != len(groups) {
				t.Errorf("%d KubeadmConfigTemplates for %d node groups (%v)", len(kcts.Items), len(groups), err)
			}
			var hrs helmv2.HelmReleaseList
			if err := k8s.List(ctx, &hrs, client.InNamespace(infra)); err != nil || len(hrs.Items) != 1 {
				t.Fatalf("add-on releases = %d (%v)", len(hrs.Items), err)
			}
			// The admin kubeconfig is referenced only from the infrastructure namespace.
			var tenantHRs helmv2.HelmReleaseList
			if err := k8s.List(ctx, &tenantHRs, client.InNamespace(ns)); err != nil || len(tenantHRs.Items) != 0 {
				t.Errorf("the tenant namespace holds %d HelmReleases", len(tenantHRs.Items))
			}
		})
	}
}

// TestProvisioningReadinessWalk simulates Cluster API and Kamaji writing their status the
// way they do, and checks each waiting reason in order, then Provisioned.
func TestProvisioningReadinessWalk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	class := newClass("walk-" + rand.String(6))
	p := planeWithClass(t, ctx, class, withGroup("workers", medium))
	key := client.ObjectKeyFromObject(p)
	infra := infraOf(p)
	provisioned := func(status metav1.ConditionStatus, reason, inMessage string) {
		t.Helper()
		eventually(t, settle, func() error {
			if err := conditionIs(ctx, key, cpv1.ProvisionedCondition, status, reason)(); err != nil {
				return err
			}
			got := &cpv1.ComputePlane{}
			if err := k8s.Get(ctx, key, got); err != nil {
				return err
			}
			if msg := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ProvisionedCondition).Message; !strings.Contains(msg, inMessage) {
				return fmt.Errorf("Provisioned message %q lacks %q", msg, inMessage)
			}
			return nil
		})
	}
	provisioned(metav1.ConditionFalse, cpv1.WaitingForInfrastructureReason, "KubevirtCluster plane is not ready")

	// CAPI mirrors the KubevirtCluster's readiness onto the Cluster.
	cluster := &clusterv1.Cluster{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: "plane"}, cluster); err != nil {
		t.Fatal(err)
	}
	setClusterCondition(ctx, t, cluster, clusterv1.ClusterInfrastructureReadyCondition, metav1.ConditionFalse, "WaitingForVMs", "0 of 1 VMs")
	provisioned(metav1.ConditionFalse, cpv1.WaitingForInfrastructureReason, "0 of 1 VMs")
	setClusterCondition(ctx, t, cluster, clusterv1.ClusterInfrastructureReadyCondition, metav1.ConditionTrue, "Ready", "")
	provisioned(metav1.ConditionFalse, cpv1.WaitingForControlPlaneReason, "has not created TenantControlPlane plane")

	// Kamaji's CAPI provider creates the TenantControlPlane; Kamaji reports it.
	tcp := newTCP(infra, "plane")
	if err := k8s.Create(ctx, tcp); err != nil {
		t.Fatal(err)
	}
	tcp.Status.Kubernetes.Version = kamajiv1alpha1.KubernetesVersion{Version: "v1.33.4", Status: ptr.To(kamajiv1alpha1.VersionProvisioning)}
	if err := k8s.Status().Update(ctx, tcp); err != nil {
		t.Fatal(err)
	}
	provisioned(metav1.ConditionFalse, cpv1.WaitingForControlPlaneReason, "TenantControlPlane plane is Provisioning")

	tcp.Status.Kubernetes.Version.Status = ptr.To(kamajiv1alpha1.VersionReady)
	tcp.Status.ControlPlaneEndpoint = "10.96.0.10:6443"
	if err := k8s.Status().Update(ctx, tcp); err != nil {
		t.Fatal(err)
	}
	provisioned(metav1.ConditionFalse, cpv1.WaitingForControlPlaneReason, "does not report the control plane of Cluster plane initialized")

	// Kamaji's CAPI provider marks the control plane initialized; CAPI mirrors it.
	setClusterCondition(ctx, t, cluster, clusterv1.ClusterControlPlaneInitializedCondition, metav1.ConditionTrue, "Initialized", "")
	provisioned(metav1.ConditionFalse, cpv1.WaitingForKubeconfigReason, "names no admin kubeconfig Secret")

	tcp.Status.KubeConfig.Admin.SecretName = "plane-admin-kubeconfig"
	if err := k8s.Status().Update(ctx, tcp); err != nil {
		t.Fatal(err)
	}
	provisioned(metav1.ConditionFalse, cpv1.WaitingForKubeconfigReason, "does not exist yet")

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: infra, Name: "plane-admin-kubeconfig"},
		Data: map[string][]byte{"super-admin.svc": []byte("not a kubeconfig: [")}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	provisioned(metav1.ConditionFalse, cpv1.KubeconfigUnusableReason, "is not a kubeconfig")

	// Whoever can write the Secret cannot make the operator send anything (least of all
	// its own ServiceAccount token, through tokenFile) anywhere, run a program, or trust
	// a server the control plane did not report.
	var requests atomic.Int32
	listener := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	defer listener.Close()
	marker := filepath.Join(t.TempDir(), "exec-ran")
	for _, attack := range []struct {
		name, want string
		kubeconfig []byte
	}{
		{"tokenFile", "users[].user.tokenFile", fakeKubeconfig(t, listener.URL, func(u map[string]any) {
			delete(u, "client-certificate-data")
			delete(u, "client-key-data")
			u["tokenFile"] = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		})},
		{"exec", "users[].user.exec", fakeKubeconfig(t, "https://10.96.0.10:6443", func(u map[string]any) {
			u["exec"] = map[string]any{"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh",
				"args": []any{"-c", "touch " + marker}, "interactiveMode": "Never"}
		})},
		{"token", "users[].user.token", fakeKubeconfig(t, "https://10.96.0.10:6443", func(u map[string]any) {
			delete(u, "client-certificate-data")
			delete(u, "client-key-data")
			u["token"] = "t"
		})},
		{"foreign server", "not an endpoint the control plane reports", fakeKubeconfig(t, listener.URL, nil)},
		{"insecure", "insecure-skip-tls-verify", fakeKubeconfig(t, "https://10.96.0.10:6443", func(map[string]any) {}, "insecure-skip-tls-verify")},
	} {
		secret.Data["super-admin.svc"] = attack.kubeconfig
		if err := k8s.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		provisioned(metav1.ConditionFalse, cpv1.KubeconfigUnusableReason, attack.want)
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
			t.Fatal(err)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the operator sent %d requests to a server named only by the Secret", n)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the operator ran a program named by the Secret")
	}

	secret.Data["super-admin.svc"] = fakeKubeconfig(t, "https://10.96.0.10:6443", nil)
	if err := k8s.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	provisioned(metav1.ConditionTrue, cpv1.SucceededReason, "Control plane v1.33.4 is up at 10.96.0.10:6443")
	got := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Endpoint != "10.96.0.10:6443" || got.Status.Version != "v1.33.4" {
		t.Errorf("endpoint/version = %q/%q", got.Status.Endpoint, got.Status.Version)
	}
	// Hardening is next; nothing answers at that address, so the gate stays closed.
	eventually(t, settle, conditionIs(ctx, key, cpv1.PodSecurityCondition, metav1.ConditionFalse, cpv1.PlaneUnreachableReason))
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionFalse, cpv1.PlaneUnreachableReason))

	// Upgrade: the control plane moves first; workers wait until Kamaji reports it Ready.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), class); err != nil {
		t.Fatal(err)
	}
	class.Spec.KubernetesVersion = "v1.34.1"
	if err := k8s.Update(ctx, class); err != nil {
		t.Fatal(err)
	}
	kcp := &unstructured.Unstructured{}
	kcp.SetAPIVersion(render.KamajiAPIVersion)
	kcp.SetKind(render.KamajiControlPlaneKind)
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: "plane"}, kcp); err != nil {
			return err
		}
		if v, _, _ := unstructured.NestedString(kcp.Object, "spec", "version"); v != "v1.34.1" {
			return fmt.Errorf("KamajiControlPlane at %s", v)
		}
		return nil
	})
	md := &clusterv1.MachineDeployment{}
	mdKey := client.ObjectKey{Namespace: infra, Name: "plane-workers"}
	if err := k8s.Get(ctx, mdKey, md); err != nil {
		t.Fatal(err)
	}
	oldTemplate := md.Spec.Template.Spec.InfrastructureRef.Name
	if md.Spec.Template.Spec.Version != "v1.33.4" {
		t.Errorf("workers moved to %s before the control plane", md.Spec.Template.Spec.Version)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(tcp), tcp); err != nil {
		t.Fatal(err)
	}
	tcp.Status.Kubernetes.Version = kamajiv1alpha1.KubernetesVersion{Version: "v1.34.1", Status: ptr.To(kamajiv1alpha1.VersionReady)}
	if err := k8s.Status().Update(ctx, tcp); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, mdKey, md); err != nil {
			return err
		}
		if md.Spec.Template.Spec.Version != "v1.34.1" || md.Spec.Template.Spec.InfrastructureRef.Name == oldTemplate {
			return fmt.Errorf("workers at %s on %s", md.Spec.Template.Spec.Version, md.Spec.Template.Spec.InfrastructureRef.Name)
		}
		return nil
	})
}

func setClusterCondition(ctx context.Context, t *testing.T, c *clusterv1.Cluster, typ string, s metav1.ConditionStatus, reason, msg string) {
	t.Helper()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg})
	if err := k8s.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// TestNodeGroupUpdates: a template change rolls (new name, MachineDeployment follows),
// the old template goes once no MachineSet uses it, a template in use stays, and a
// removed group's MachineDeployment is deleted.
func TestNodeGroupUpdates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	class := newClass("roll-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.NodeGroups.InstanceTypes = []string{"u1.medium", "u1.large", "u1.xlarge"}
	})
	p := planeWithClass(t, ctx, class, withGroup("workers", medium), withGroup("extra", medium))
	infra := infraOf(p)
	md := &clusterv1.MachineDeployment{}
	mdKey := client.ObjectKey{Namespace: infra, Name: "plane-workers"}
	var first string
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, mdKey, md); err != nil {
			return err
		}
		first = md.Spec.Template.Spec.InfrastructureRef.Name
		return nil
	})

	// A MachineSet still runs machines from the first template.
	ms := &clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: infra, Name: "plane-workers-abc",
		Labels: map[string]string{cpv1.ClusterNameLabel: "plane"}},
		Spec: clusterv1.MachineSetSpec{ClusterName: "plane",
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"set": "abc"}},
			Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"set": "abc"}},
				Spec: clusterv1.MachineSpec{ClusterName: "plane",
					Bootstrap:         clusterv1.Bootstrap{ConfigRef: md.Spec.Template.Spec.Bootstrap.ConfigRef},
					InfrastructureRef: md.Spec.Template.Spec.InfrastructureRef}}}}
	if err := k8s.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}

	roll := func(instanceType, prev string) string {
		t.Helper()
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(p.DeepCopy())
		g := p.Spec.NodeGroups["workers"]
		g.InstanceType = instanceType
		p.Spec.NodeGroups["workers"] = g
		if err := k8s.Patch(ctx, p, patch); err != nil {
			t.Fatal(err)
		}
		var name string
		eventually(t, settle, func() error {
			if err := k8s.Get(ctx, mdKey, md); err != nil {
				return err
			}
			name = md.Spec.Template.Spec.InfrastructureRef.Name
			if name == prev {
				return errors.New("MachineDeployment still on the previous template")
			}
			return nil
		})
		return name
	}
	second := roll("u1.large", first)
	third := roll("u1.xlarge", second)
	if second == third {
		t.Fatal("two different instance types share a template name")
	}
	templateNames := func() map[string]bool {
		out := map[string]bool{}
		for _, kmt := range kmtList(ctx, t, infra) {
			out[kmt.GetName()] = true
		}
		return out
	}
	eventually(t, settle, func() error {
		names := templateNames()
		switch {
		case !names[first]:
			return errors.New("the template a MachineSet still uses was deleted")
		case names[second]:
			return errors.New("the unused intermediate template was not cleaned up")
		case !names[third]:
			return errors.New("the current template is missing")
		}
		return nil
	})

	// The MachineSet goes (CAPI replaced the machines): the first template goes too.
	if err := k8s.Delete(ctx, ms); err != nil {
		t.Fatal(err)
	}
	// Nothing about the plane changed, so ask for a reconcile the Flux way.
	requestReconcile(t, ctx, p, "after-machineset")
	eventually(t, settle, func() error {
		if templateNames()[first] {
			return errors.New("the first template outlived its last MachineSet")
		}
		return nil
	})

	// Removing a node group removes its MachineDeployment.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	delete(p.Spec.NodeGroups, "extra")
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: "plane-extra"}, &clusterv1.MachineDeployment{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("removed group's MachineDeployment still there (err=%v)", err)
	})
}

// TestDeletionWaitsForClusterAPI: the plane's finalizer holds until Cluster API has
// deleted the Cluster, the wait is visible, and the add-ons and leftovers go.
func TestDeletionWaitsForClusterAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	class := newClass("teardown-" + rand.String(6))
	p := planeWithClass(t, ctx, class, withGroup("workers", medium))
	key := client.ObjectKeyFromObject(p)
	infra := infraOf(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.ProvisionedCondition, metav1.ConditionFalse, cpv1.WaitingForInfrastructureReason))

	// Cluster API's finalizer on the Cluster, as its controller would add.
	cluster := &clusterv1.Cluster{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: "plane"}, cluster); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cluster.DeepCopy())
	controllerutil.AddFinalizer(cluster, clusterv1.ClusterFinalizer)
	if err := k8s.Patch(ctx, cluster, patch); err != nil {
		t.Fatal(err)
	}

	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		rec := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReconcilingCondition)
		if rec == nil || !strings.Contains(rec.Message, "waiting for Cluster API to delete Cluster") {
			return fmt.Errorf("Reconciling = %+v", rec)
		}
		if !apimeta.IsStatusConditionFalse(got.Status.Conditions, cpv1.ReadyCondition) {
			return errors.New("Ready is not False while deleting")
		}
		return nil
	})
	var hrs helmv2.HelmReleaseList
	if err := k8s.List(ctx, &hrs, client.InNamespace(infra)); err != nil || len(hrs.Items) != 0 {
		t.Errorf("add-on releases left before the Cluster went: %d (%v)", len(hrs.Items), err)
	}

	// Cluster API finishes.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
		t.Fatal(err)
	}
	patch = client.MergeFrom(cluster.DeepCopy())
	controllerutil.RemoveFinalizer(cluster, clusterv1.ClusterFinalizer)
	if err := k8s.Patch(ctx, cluster, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, planeGone(ctx, key))
	if n := len(kmtList(ctx, t, infra)); n != 0 {
		t.Errorf("%d machine templates left behind", n)
	}
	nsObj := &corev1.Namespace{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: infra}, nsObj); err == nil && nsObj.DeletionTimestamp.IsZero() {
		t.Error("the infrastructure namespace was not deleted")
	}
}

// TestAttackTenantNamespacePlacementRefused: infrastructure in the tenant namespace put
// Kamaji's admin kubeconfig where a tenant's HelmRelease or Kustomization could name it
// (kubeConfig.secretRef) and be applied as the plane's super-admin. The mode is gone: a
// class asking for it is refused at admission.
func TestAttackTenantNamespacePlacementRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := newClass("inplace-" + rand.String(6))
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(class)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: u}
	obj.SetGroupVersionKind(cpv1.GroupVersion.WithKind("ComputePlaneClass"))
	if err := unstructured.SetNestedField(obj.Object, "TenantNamespace", "spec", "infrastructure", "placement"); err != nil {
		t.Fatal(err)
	}
	denied(t, k8s.Create(ctx, obj), `spec.infrastructure.placement: Unsupported value: "TenantNamespace": supported values: "DedicatedNamespace"`)
}

// TestInfrastructureNamespaceLabelsRestored: the labels the operator renders on a plane's
// infrastructure namespace (the Pod Security level of the VMs' pods, the links to the
// plane) come back when someone with namespace rights changes them; the namespace is
// patched, never recreated.
func TestInfrastructureNamespaceLabelsRestored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("infra-labels-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.ProvisionedCondition, metav1.ConditionFalse, cpv1.WaitingForInfrastructureReason))
	nsKey := client.ObjectKey{Name: infraOf(p)}
	ns := &corev1.Namespace{}
	if err := k8s.Get(ctx, nsKey, ns); err != nil {
		t.Fatal(err)
	}
	want := ns.DeepCopy().Labels
	changed := ns.DeepCopy()
	delete(changed.Labels, cpv1.PlaneNameLabel)
	changed.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
	if err := k8s.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		got := &corev1.Namespace{}
		if err := k8s.Get(ctx, nsKey, got); err != nil {
			return err
		}
		if got.UID != ns.UID {
			return errors.New("the namespace was recreated")
		}
		for k, v := range want {
			if got.Labels[k] != v {
				return fmt.Errorf("label %s = %q, want %q", k, got.Labels[k], v)
			}
		}
		return nil
	})
}
