package capistandin

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cozystack/computeplane/controllers/render"
)

// KamajiControlPlaneGVK is the provider's kind (v0.20.0 serves v1alpha2).
var KamajiControlPlaneGVK = schema.FromAPIVersionAndKind(render.KamajiAPIVersion, render.KamajiControlPlaneKind)

// kamajiControlPlanes plays the provider's KamajiControlPlaneReconciler
// (controllers/kamajicontrolplane_controller.go Reconcile), without the external cluster
// reference, Gateway, Ingress and LoadBalancer paths a ComputePlane does not use.
type kamajiControlPlanes struct {
	client client.Client
}

func newKCP() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(KamajiControlPlaneGVK)
	return u
}

// requeue is the provider's fixed wait (`RequeueAfter: time.Second` throughout).
var requeue = ctrl.Result{RequeueAfter: time.Second}

func (r *kamajiControlPlanes) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	kcp := newKCP()
	if err := r.client.Get(ctx, req.NamespacedName, kcp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// "The ControlPlane must have an OwnerReference set from the Cluster controller".
	owners := kcp.GetOwnerReferences()
	if len(owners) == 0 {
		return ctrl.Result{}, nil
	}
	cluster := &clusterv1.Cluster{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: kcp.GetNamespace(), Name: owners[0].Name}, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if paused(cluster, kcp) || !kcp.GetDeletionTimestamp().IsZero() {
		// Deletion handles only the external cluster reference's finalizer.
		return ctrl.Result{}, nil
	}
	tcp, err := r.createOrUpdateTenantControlPlane(ctx, cluster, kcp)
	if err != nil {
		return ctrl.Result{}, err
	}
	if tcp.Status.ControlPlaneEndpoint == "" {
		return requeue, nil // ErrUnprocessedControlPlaneEndpoint
	}
	host, port, err := splitEndpoint(tcp.Status.ControlPlaneEndpoint)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.patchControlPlaneEndpoint(ctx, kcp, host, port); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if err := r.patchCluster(ctx, cluster, host, port); err != nil {
		return ctrl.Result{}, err
	}
	if cluster.Spec.ControlPlaneEndpoint.Host == "" || !deref(cluster.Status.Initialization.InfrastructureProvisioned) {
		return requeue, nil
	}
	version := tcp.Status.Kubernetes.Version.Status
	if version == nil {
		return requeue, nil
	}
	initialized, _, _ := unstructured.NestedBool(kcp.Object, "status", "initialization", "controlPlaneInitialized")
	if *version == kamajiv1alpha1.VersionReady {
		initialized = true
	}
	if !initialized {
		return requeue, nil
	}
	ready := *version == kamajiv1alpha1.VersionReady || *version == kamajiv1alpha1.VersionUpgrading
	if err := r.updateStatus(ctx, kcp, tcp, ready); err != nil {
		return ctrl.Result{}, err
	}
	if wait, err := r.createRequiredResources(ctx, cluster, kcp, tcp); err != nil || wait {
		return requeue, err
	}
	if !ready {
		return requeue, nil // "TenantControlPlane in %s status, ErrEnqueueBack"
	}
	return ctrl.Result{}, nil
}

// createOrUpdateTenantControlPlane follows kamajicontrolplane_controller_tcp.go: the
// KamajiControlPlane's annotations (but kubectl's last-applied) and labels, the Cluster's
// network, and the spec fields a ComputePlane's KamajiControlPlane sets, copied through
// their JSON so the CRD defaults applied to the KamajiControlPlane (the Konnectivity
// server's port, the kubelet's cgroup driver) carry over as the provider's Go types do.
func (r *kamajiControlPlanes) createOrUpdateTenantControlPlane(ctx context.Context, cluster *clusterv1.Cluster, kcp *unstructured.Unstructured) (*kamajiv1alpha1.TenantControlPlane, error) {
	var spec struct {
		Version       string                              `json:"version"`
		Replicas      *int32                              `json:"replicas"`
		DataStoreName string                              `json:"dataStoreName"`
		Addons        kamajiv1alpha1.AddonsSpec           `json:"addons"`
		Kubelet       kamajiv1alpha1.KubeletSpec          `json:"kubelet"`
		AdmissionCtrl kamajiv1alpha1.AdmissionControllers `json:"admissionControllers"`
		Network       struct {
			ServiceType    kamajiv1alpha1.ServiceType `json:"serviceType"`
			ServiceAddress string                     `json:"serviceAddress"`
			CertSANs       []string                   `json:"certSANs"`
		} `json:"network"`
	}
	raw, err := json.Marshal(kcp.Object["spec"])
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("KamajiControlPlane %s/%s: %w", kcp.GetNamespace(), kcp.GetName(), err)
	}
	tcp := &kamajiv1alpha1.TenantControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: kcp.GetNamespace(), Name: kcp.GetName()}}
	_, err = controllerutil.CreateOrUpdate(ctx, r.client, tcp, func() error {
		if tcp.Annotations == nil {
			tcp.Annotations = map[string]string{}
		}
		for k, v := range kcp.GetAnnotations() {
			if k != corev1.LastAppliedConfigAnnotation {
				tcp.Annotations[k] = v
			}
		}
		tcp.Labels = kcp.GetLabels()
		if key := kcp.GetAnnotations()[kamajiv1alpha1.KubeconfigSecretKeyAnnotation]; key != "" {
			tcp.Annotations[kamajiv1alpha1.KubeconfigSecretKeyAnnotation] = key
		} else {
			delete(tcp.Annotations, kamajiv1alpha1.KubeconfigSecretKeyAnnotation)
		}
		net := cluster.Spec.ClusterNetwork
		if net.APIServerPort != 0 {
			tcp.Spec.NetworkProfile.Port = net.APIServerPort
		}
		if len(net.Services.CIDRBlocks) > 0 {
			tcp.Spec.NetworkProfile.ServiceCIDR = net.Services.CIDRBlocks[0]
		}
		if len(net.Pods.CIDRBlocks) > 0 {
			tcp.Spec.NetworkProfile.PodCIDR = net.Pods.CIDRBlocks[0]
		}
		// clusterDomain and advertiseAddress: not in Kamaji v1.0.0's TenantControlPlane.
		tcp.Spec.ControlPlane.Deployment.Replicas = spec.Replicas
		tcp.Spec.Kubernetes.Version = spec.Version
		if !strings.HasPrefix(spec.Version, "v") {
			tcp.Spec.Kubernetes.Version = "v" + spec.Version
		}
		tcp.Spec.Addons = spec.Addons
		if spec.DataStoreName != "" {
			tcp.Spec.DataStore = spec.DataStoreName
		}
		tcp.Spec.Kubernetes.AdmissionControllers = spec.AdmissionCtrl
		tcp.Spec.Kubernetes.Kubelet = spec.Kubelet
		tcp.Spec.NetworkProfile.Address = spec.Network.ServiceAddress
		tcp.Spec.NetworkProfile.CertSANs = spec.Network.CertSANs
		tcp.Spec.ControlPlane.Service.ServiceType = spec.Network.ServiceType
		return controllerutil.SetControllerReference(kcp, tcp, r.client.Scheme())
	})
	if err != nil {
		return nil, fmt.Errorf("cannot create or update TenantControlPlane: %w", err)
	}
	return tcp, nil
}

// splitEndpoint follows controlPlaneEndpoint (kamajicontrolplane_controller_cluster_patch.go)
// without the Ingress and Gateway hostnames.
func splitEndpoint(hostPort string) (string, int64, error) {
	host, p, err := net.SplitHostPort(hostPort)
	if err != nil {
		return "", 0, fmt.Errorf("cannot split the Kamaji endpoint host port pair: %w", err)
	}
	port, err := strconv.ParseInt(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("cannot convert port to integer: %w", err)
	}
	return host, port, nil
}

// patchControlPlaneEndpoint sets the KamajiControlPlane's spec.controlPlaneEndpoint
// (the Cluster API v1.8+ control-plane contract).
func (r *kamajiControlPlanes) patchControlPlaneEndpoint(ctx context.Context, kcp *unstructured.Unstructured, host string, port int64) error {
	want := map[string]any{"host": host, "port": port}
	if got, _, _ := unstructured.NestedMap(kcp.Object, "spec", "controlPlaneEndpoint"); got["host"] == host && got["port"] == port {
		return nil
	}
	patch := client.MergeFrom(kcp.DeepCopy())
	if err := unstructured.SetNestedMap(kcp.Object, want, "spec", "controlPlaneEndpoint"); err != nil {
		return err
	}
	return r.client.Patch(ctx, kcp, patch)
}

// patchCluster follows patchCluster/patchGenericCluster for a KubevirtCluster: the
// endpoint on its spec and, since CAPK leaves an externally managed cluster alone,
// status.ready.
func (r *kamajiControlPlanes) patchCluster(ctx context.Context, cluster *clusterv1.Cluster, host string, port int64) error {
	ref := cluster.Spec.InfrastructureRef
	if !ref.IsDefined() {
		return fmt.Errorf("Cluster %s/%s has no InfrastructureRef", cluster.Namespace, cluster.Name)
	}
	if ref.Kind != render.KubevirtClusterKind {
		return fmt.Errorf("unsupported infrastructure provider %s", ref.Kind)
	}
	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(render.KubevirtAPIVersion)
	infra.SetKind(ref.Kind)
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: ref.Name}, infra); err != nil {
		return fmt.Errorf("cannot retrieve infrastructure cluster %s: %w", ref.Kind, err)
	}
	if got, _, _ := unstructured.NestedMap(infra.Object, "spec", "controlPlaneEndpoint"); got["host"] != host || got["port"] != port {
		patch := client.MergeFrom(infra.DeepCopy())
		if err := unstructured.SetNestedMap(infra.Object, map[string]any{"host": host, "port": port}, "spec", "controlPlaneEndpoint"); err != nil {
			return err
		}
		if err := r.client.Patch(ctx, infra, patch); err != nil {
			return err
		}
	}
	if ready, _, _ := unstructured.NestedBool(infra.Object, "status", "ready"); ready {
		return nil
	}
	patch := client.MergeFrom(infra.DeepCopy())
	if err := unstructured.SetNestedField(infra.Object, true, "status", "ready"); err != nil {
		return err
	}
	return r.client.Status().Patch(ctx, infra, patch)
}

// updateStatus reports the TenantControlPlane's Deployment on the KamajiControlPlane, as
// the provider's three updateKamajiControlPlaneStatus calls after initialisation do, with
// the Available condition Cluster API mirrors onto the Cluster.
func (r *kamajiControlPlanes) updateStatus(ctx context.Context, kcp *unstructured.Unstructured, tcp *kamajiv1alpha1.TenantControlPlane, ready bool) error {
	patch := client.MergeFrom(kcp.DeepCopy())
	d := tcp.Status.Kubernetes.Deployment
	status, _, _ := unstructured.NestedMap(kcp.Object, "status")
	if status == nil {
		status = map[string]any{}
	}
	status["initialization"] = map[string]any{"controlPlaneInitialized": true}
	status["readyReplicas"] = int64(d.ReadyReplicas)
	status["replicas"] = int64(d.Replicas)
	status["selector"] = d.Selector
	status["availableReplicas"] = int64(d.AvailableReplicas)
	status["upToDateReplicas"] = int64(d.UpdatedReplicas)
	status["version"] = tcp.Status.Kubernetes.Version.Version
	status["ready"] = ready
	status["externalManagedControlPlane"] = true
	var conds []metav1.Condition
	if raw, ok := status["conditions"]; ok {
		if b, err := json.Marshal(raw); err == nil {
			_ = json.Unmarshal(b, &conds)
		}
	}
	available, reason := metav1.ConditionFalse, "NotAvailable"
	if ready {
		available, reason = metav1.ConditionTrue, "Available"
	}
	apimeta.SetStatusCondition(&conds, metav1.Condition{Type: "Available", Status: available, Reason: reason, ObservedGeneration: kcp.GetGeneration()})
	b, err := json.Marshal(conds)
	if err != nil {
		return err
	}
	var list []any
	if err := json.Unmarshal(b, &list); err != nil {
		return err
	}
	status["conditions"] = list
	if err := unstructured.SetNestedMap(kcp.Object, status, "status"); err != nil {
		return err
	}
	return r.client.Status().Patch(ctx, kcp, patch)
}

// createRequiredResources follows kamajicontrolplane_controller_resources.go: Cluster
// API's <cluster>-kubeconfig Secret holds, under "value", the key of Kamaji's admin
// kubeconfig the annotation names (admin.conf by default), and <cluster>-ca the CA. wait
// says Kamaji has not written them yet.
func (r *kamajiControlPlanes) createRequiredResources(ctx context.Context, cluster *clusterv1.Cluster, kcp *unstructured.Unstructured, tcp *kamajiv1alpha1.TenantControlPlane) (wait bool, err error) {
	adminName, caName := tcp.Status.KubeConfig.Admin.SecretName, tcp.Status.Certificates.CA.SecretName
	if adminName == "" || caName == "" {
		return true, nil
	}
	admin := &corev1.Secret{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: tcp.Namespace, Name: adminName}, admin); err != nil {
		return false, fmt.Errorf("cannot retrieve source-of-truth for admin kubeconfig: %w", err)
	}
	key := "admin.conf"
	if v := kcp.GetAnnotations()[kamajiv1alpha1.KubeconfigSecretKeyAnnotation]; v != "" {
		key = v
	}
	value, ok := admin.Data[key]
	if !ok {
		return false, fmt.Errorf("missing key %s from the TenantControlPlane's admin kubeconfig secret", key)
	}
	if err := r.capiSecret(ctx, cluster, kcp, tcp, "kubeconfig", map[string][]byte{"value": value}); err != nil {
		return false, fmt.Errorf("cannot create or update admin Kubeconfig secret: %w", err)
	}
	ca := &corev1.Secret{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: tcp.Namespace, Name: caName}, ca); err != nil {
		return false, fmt.Errorf("cannot retrieve source-of-truth as Certificate Authority: %w", err)
	}
	if len(ca.Data["ca.crt"]) == 0 || len(ca.Data["ca.key"]) == 0 {
		return false, fmt.Errorf("the TenantControlPlane's CA Secret %s lacks ca.crt or ca.key", caName)
	}
	if err := r.capiSecret(ctx, cluster, kcp, tcp, "ca", map[string][]byte{
		corev1.TLSCertKey: ca.Data["ca.crt"], corev1.TLSPrivateKeyKey: ca.Data["ca.key"],
	}); err != nil {
		return false, fmt.Errorf("cannot create or update CA secret: %w", err)
	}
	return false, nil
}

// capiSecret writes <cluster>-<suffix> with the provider's labels, type and controller
// reference.
func (r *kamajiControlPlanes) capiSecret(ctx context.Context, cluster *clusterv1.Cluster, kcp *unstructured.Unstructured, tcp *kamajiv1alpha1.TenantControlPlane, suffix string, data map[string][]byte) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: cluster.Name + "-" + suffix}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.client, s, func() error {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[clusterv1.ClusterNameLabel] = cluster.Name
		s.Labels["kamaji.clastix.io/component"] = "capi"
		s.Labels["kamaji.clastix.io/secret"] = suffix
		s.Labels["kamaji.clastix.io/cluster"] = cluster.Name
		s.Labels["kamaji.clastix.io/tcp"] = tcp.Name
		s.Data = data
		s.Type = clusterv1.ClusterSecretType
		return controllerutil.SetControllerReference(kcp, s, r.client.Scheme())
	})
	return err
}

// clusterToControlPlane requeues a Cluster's KamajiControlPlane when the Cluster
// changes (the provider requeues every second until the Cluster is ready; this only
// shortens the wait).
func clusterToControlPlane(_ context.Context, o client.Object) []reconcile.Request {
	c, ok := o.(*clusterv1.Cluster)
	if !ok || c.Spec.ControlPlaneRef.Kind != render.KamajiControlPlaneKind {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.ControlPlaneRef.Name}}}
}

var _ handler.MapFunc = clusterToControlPlane

// paused is Cluster API's annotations.IsPaused: the Cluster's spec.paused, or the paused
// annotation on either object.
func paused(cluster *clusterv1.Cluster, o metav1.Object) bool {
	if cluster.Spec.Paused != nil && *cluster.Spec.Paused {
		return true
	}
	_, ok := o.GetAnnotations()[clusterv1.PausedAnnotation]
	return ok
}

func deref(b *bool) bool { return b != nil && *b }
