package capistandin

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv/vm"
	"github.com/cozystack/computeplane/netpol"
)

// KubevirtMachineKind is CAPK's machine kind, which Cluster API's MachineSet controller
// clones from the operator's KubevirtMachineTemplate.
const KubevirtMachineKind = "KubevirtMachine"

// kubevirtMachineFinalizer is CAPK's (api/v1alpha1/kubevirtmachine_types.go).
const kubevirtMachineFinalizer = "kubevirtmachine.infrastructure.cluster.x-k8s.io"

func newKubevirtMachine() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(render.KubevirtAPIVersion)
	u.SetKind(KubevirtMachineKind)
	return u
}

// kubevirtMachines follows CAPK v0.1.10's KubevirtMachineReconciler
// (controllers/kubevirtmachine_controller.go) with a vm.Host for KubeVirt: once its
// Machine has bootstrap data, the VM (named after the KubevirtMachine, which CAPK also
// makes its hostname) boots from it; the KubevirtMachine gets its provider ID
// (kubevirt://<name>, pkg/kubevirt/machine.go GenerateProviderID), its addresses and
// status.ready; and once the VM's Node has joined, that Node gets the provider ID
// (updateNodeProviderID: nothing else sets it, and Cluster API finds a Machine's Node by
// it). Deleting the KubevirtMachine powers the VM off and deletes it.
type kubevirtMachines struct {
	client client.Client
	host   *vm.Host

	mu        sync.Mutex
	workloads map[types.UID]client.Client // by Cluster UID: a recreated Cluster is another plane
}

func (r *kubevirtMachines) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	km := newKubevirtMachine()
	if err := r.client.Get(ctx, req.NamespacedName, km); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// A VM goes with its KubevirtMachine whether or not its Machine is still there.
	if !km.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, km)
	}
	machine, err := r.ownerMachine(ctx, km)
	if err != nil || machine == nil {
		return ctrl.Result{}, err
	}
	cluster := &clusterv1.Cluster{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: km.GetNamespace(), Name: machine.Spec.ClusterName}, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if paused(cluster, km) {
		return ctrl.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(km, kubevirtMachineFinalizer) {
		patch := client.MergeFrom(km.DeepCopy())
		controllerutil.AddFinalizer(km, kubevirtMachineFinalizer)
		return ctrl.Result{}, r.client.Patch(ctx, km, patch)
	}
	if !deref(cluster.Status.Initialization.InfrastructureProvisioned) || machine.Spec.Bootstrap.DataSecretName == nil {
		return ctrl.Result{}, nil // the Cluster and the Machine are watched
	}
	data := &corev1.Secret{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: km.GetNamespace(), Name: *machine.Spec.Bootstrap.DataSecretName}, data); err != nil {
		return ctrl.Result{}, err
	}
	v, err := r.host.Boot(ctx, km.GetName(), data.Data["value"], launcherPod(km))
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("booting the VM of KubevirtMachine %s: %w", req, err)
	}
	providerID := "kubevirt://" + km.GetName()
	if got, _, _ := unstructured.NestedString(km.Object, "spec", "providerID"); got != providerID {
		patch := client.MergeFrom(km.DeepCopy())
		_ = unstructured.SetNestedField(km.Object, providerID, "spec", "providerID")
		if err := r.client.Patch(ctx, km, patch); err != nil {
			return ctrl.Result{}, err
		}
	}
	nodeUpdated, requeue, err := r.updateNodeProviderID(ctx, cluster, km.GetName(), providerID)
	if err != nil {
		return ctrl.Result{}, err
	}
	patch := client.MergeFrom(km.DeepCopy())
	status := map[string]any{"ready": true, "nodeupdated": nodeUpdated, "addresses": []any{
		map[string]any{"type": string(clusterv1.MachineHostName), "address": km.GetName()},
		map[string]any{"type": string(clusterv1.MachineInternalIP), "address": v.Address()},
		map[string]any{"type": string(clusterv1.MachineExternalIP), "address": v.Address()},
		map[string]any{"type": string(clusterv1.MachineInternalDNS), "address": km.GetName()},
	}}
	before, _, _ := unstructured.NestedMap(km.Object, "status")
	merged := make(map[string]any, len(before)+len(status))
	for k, v := range before {
		merged[k] = v
	}
	for k, v := range status {
		merged[k] = v
	}
	// Quiet when nothing changed: a KubevirtMachine is reconciled on every Machine event.
	if !equality.Semantic.DeepEqual(before, merged) {
		_ = unstructured.SetNestedField(km.Object, merged, "status")
		if err := r.client.Status().Patch(ctx, km, patch); err != nil {
			return ctrl.Result{}, err
		}
	}
	if requeue {
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	return ctrl.Result{}, nil
}

// ownerMachine is the Machine that owns the KubevirtMachine (Cluster API's Machine
// controller sets it), nil until then.
func (r *kubevirtMachines) ownerMachine(ctx context.Context, km *unstructured.Unstructured) (*clusterv1.Machine, error) {
	for _, ref := range km.GetOwnerReferences() {
		if ref.Kind != "Machine" || ref.APIVersion != clusterv1.GroupVersion.String() {
			continue
		}
		m := &clusterv1.Machine{}
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: km.GetNamespace(), Name: ref.Name}, m); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return m, nil
	}
	return nil, nil
}

// updateNodeProviderID sets the provider ID on the Node named after the VM, once it
// exists in the plane; it reports whether the Node has it, and whether to look again.
func (r *kubevirtMachines) updateNodeProviderID(ctx context.Context, cluster *clusterv1.Cluster, name, providerID string) (updated, requeue bool, err error) {
	plane, err := r.workload(ctx, cluster)
	if err != nil {
		return false, true, nil // no kubeconfig Secret yet
	}
	node := &corev1.Node{}
	if err := plane.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return false, true, nil // the VM has not joined yet
		}
		return false, false, fmt.Errorf("reading node %s: %w", name, err)
	}
	if node.Spec.ProviderID == providerID {
		return true, false, nil
	}
	if node.Spec.ProviderID != "" {
		return false, false, fmt.Errorf("node %s has provider ID %q, not %q", name, node.Spec.ProviderID, providerID)
	}
	if err := plane.Patch(ctx, node, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"providerID":%q}}`, providerID))); err != nil {
		return false, false, fmt.Errorf("setting node %s's provider ID: %w", name, err)
	}
	return true, false, nil
}

// workload is a client of the plane, from the Cluster's <cluster>-kubeconfig Secret.
func (r *kubevirtMachines) workload(ctx context.Context, cluster *clusterv1.Cluster) (client.Client, error) {
	key := cluster.UID
	r.mu.Lock()
	c, ok := r.workloads[key]
	r.mu.Unlock()
	if ok {
		return c, nil
	}
	s := &corev1.Secret{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: cluster.Name + "-kubeconfig"}, s); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["value"])
	if err != nil {
		return nil, err
	}
	c, err = client.New(cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.workloads == nil {
		r.workloads = map[types.UID]client.Client{}
	}
	r.workloads[key] = c
	r.mu.Unlock()
	return c, nil
}

// reconcileDelete powers the VM off and deletes it, then lets the KubevirtMachine go.
func (r *kubevirtMachines) reconcileDelete(ctx context.Context, km *unstructured.Unstructured) error {
	if err := r.host.Delete(km.GetName()); err != nil {
		return err
	}
	if !controllerutil.ContainsFinalizer(km, kubevirtMachineFinalizer) {
		return nil
	}
	patch := client.MergeFrom(km.DeepCopy())
	controllerutil.RemoveFinalizer(km, kubevirtMachineFinalizer)
	return r.client.Patch(ctx, km, patch)
}

// machineToKubevirtMachine requeues the KubevirtMachine a Machine refers to.
func machineToKubevirtMachine(_ context.Context, o client.Object) []reconcile.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok || m.Spec.InfrastructureRef.Kind != KubevirtMachineKind {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}}}
}

// clusterToKubevirtMachines requeues a Cluster's KubevirtMachines (its infrastructure's
// readiness gates them).
func (r *kubevirtMachines) clusterToKubevirtMachines(ctx context.Context, o client.Object) []reconcile.Request {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion(render.KubevirtAPIVersion)
	list.SetKind(KubevirtMachineKind + "List")
	if err := r.client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, km := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&km)})
	}
	return out
}

// launcherPod is the pod KubeVirt's virt-controller would make for the KubevirtMachine's
// VirtualMachineInstance (CAPK names the VM after the KubevirtMachine): in its
// namespace, named virt-launcher-<vmi>-<suffix>, with the labels of the VM template CAPK
// copies from spec.virtualMachineTemplate (the operator's plane selector among them),
// kubevirt.io=virt-launcher and vm.kubevirt.io/name (kubevirt.io/kubevirt
// pkg/virt-controller/services/template.go). The suffix comes from the UID, so the same
// machine is always the same pod.
func launcherPod(km *unstructured.Unstructured) vm.Pod {
	labels := map[string]string{}
	tmpl, _, _ := unstructured.NestedStringMap(km.Object, "spec", "virtualMachineTemplate", "spec", "template", "metadata", "labels")
	for k, v := range tmpl {
		labels[k] = v
	}
	labels[netpol.VirtLauncherLabel] = netpol.VirtLauncherValue
	labels["vm.kubevirt.io/name"] = km.GetName()
	sum := sha256.Sum256([]byte(km.GetUID()))
	suffix := strings.ToLower(base32.StdEncoding.EncodeToString(sum[:]))[:5]
	return vm.Pod{Namespace: km.GetNamespace(), Name: "virt-launcher-" + km.GetName() + "-" + suffix, Labels: labels}
}
