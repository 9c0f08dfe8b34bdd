// Package devprovider stands in for Kamaji, its Cluster API control-plane provider and
// Cluster API's readiness reporting on
// a machine that runs neither (no Docker, no VMs): for every KamajiControlPlane it starts
// a real kube-apiserver on loopback and reports it the way the providers do — a
// TenantControlPlane with Kamaji's status, the admin kubeconfig Secret Kamaji writes, and
// the KamajiControlPlane's status. The demo and the e2e scenarios use it; production
// never does.
//
// With Shared set, a few apiservers serve every plane (for fleet-scale measurements;
// see Provider.Shared).
package devprovider

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/cozystack/computeplane/internal/devenv"
)

// KamajiControlPlaneGVK is the kind the provider reacts to (Kamaji's CAPI provider v0.20).
var KamajiControlPlaneGVK = schema.GroupVersionKind{
	Group: "controlplane.cluster.x-k8s.io", Version: "v1alpha2", Kind: "KamajiControlPlane",
}

// Provider runs one tenant apiserver per KamajiControlPlane, or, with Shared, a few
// apiservers for all of them.
type Provider struct {
	Client client.Client
	Scheme *runtime.Scheme

	// Shared, when > 0, serves the KamajiControlPlanes from that many tenant apiservers
	// (started lazily; planes assigned round-robin in the order the provider first sees
	// them) instead of one each, so a fleet of hundreds of Ready planes fits one machine.
	// Every plane still gets its own TenantControlPlane, status, admin kubeconfig Secret
	// and endpoint, so the operator keeps one connection, one client and one informer
	// set per plane exactly as with separate clusters. The endpoint is a view of the
	// shared apiserver that maps the plane's tenant namespace and UID onto those of the
	// first plane that apiserver served (see sharedServer for why): every plane of a
	// class then reads and writes the same objects, and the figures per plane are those
	// of a plane alone in its cluster. Shared planes must have the same name and tenant
	// namespaces of the same length that are no substring of one another (fleet-0001,
	// fleet-0002, ...). A plane's deletion closes its view only; Stop stops every
	// apiserver. The views ask for JSON (they rewrite it), where a direct connection
	// would use protobuf for built-in kinds.
	Shared int
	// TenantOptions shape the tenant apiservers the provider starts (Audit, say).
	TenantOptions devenv.TenantOptions

	mu      sync.Mutex
	tenants map[types.NamespacedName]*devenv.Cluster
	pool    []*sharedServer
	views   map[types.NamespacedName]*view
	seen    int
}

// SetupWithManager registers the provider's controller.
func (p *Provider) SetupWithManager(mgr ctrl.Manager) error {
	kcp := &unstructured.Unstructured{}
	kcp.SetGroupVersionKind(KamajiControlPlaneGVK)
	return ctrl.NewControllerManagedBy(mgr).Named("devprovider").For(kcp).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).Complete(p)
}

// Tenant returns the running apiserver of a KamajiControlPlane (in shared mode, the
// apiserver its view reaches), or nil.
func (p *Provider) Tenant(key types.NamespacedName) *devenv.Cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v := p.views[key]; v != nil {
		return p.pool[v.group].tenant
	}
	return p.tenants[key]
}

// SharedTenants returns the shared apiservers started so far (Shared), in order.
func (p *Provider) SharedTenants() []*devenv.Cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*devenv.Cluster, len(p.pool))
	for i, s := range p.pool {
		out[i] = s.tenant
	}
	return out
}

// StopTenant stops one tenant apiserver, as if the control plane crashed. It returns
// once the apiserver is down, and only then forgets it. In shared mode it closes the
// plane's view (its endpoint stops answering) and leaves the shared apiserver running.
func (p *Provider) StopTenant(key types.NamespacedName) error {
	p.mu.Lock()
	if v := p.views[key]; v != nil {
		delete(p.views, key)
		p.mu.Unlock()
		v.close()
		return nil
	}
	p.mu.Unlock()
	t := p.Tenant(key)
	if err := t.Stop(); err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.tenants, key)
	p.mu.Unlock()
	return nil
}

// Stop stops every tenant apiserver.
func (p *Provider) Stop() {
	p.mu.Lock()
	tenants, views, pool := p.tenants, p.views, p.pool
	p.tenants, p.views, p.pool = nil, nil, nil
	p.mu.Unlock()
	for _, v := range views {
		v.close()
	}
	for _, t := range tenants {
		_ = t.Stop()
	}
	for _, s := range pool {
		_ = s.tenant.Stop()
	}
}

// Reconcile brings a KamajiControlPlane's stand-in up and reports it.
func (p *Provider) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	kcp := &unstructured.Unstructured{}
	kcp.SetGroupVersionKind(KamajiControlPlaneGVK)
	if err := p.Client.Get(ctx, req.NamespacedName, kcp); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, p.StopTenant(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !kcp.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, p.StopTenant(req.NamespacedName)
	}
	version, _, _ := unstructured.NestedString(kcp.Object, "spec", "version")

	tenant, host, caPEM, err := p.endpointFor(req.NamespacedName, kcp)
	if err != nil {
		return ctrl.Result{}, err
	}
	secretName, err := p.ensureAdminKubeconfig(ctx, tenant, kcp, host, caPEM)
	if err != nil {
		return ctrl.Result{}, err
	}
	endpoint, err := url.Parse(host)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := p.reportTenantControlPlane(ctx, kcp, version, secretName, endpoint.Host); err != nil {
		return ctrl.Result{}, err
	}
	if err := p.reportKamajiControlPlane(ctx, kcp, version, endpoint); err != nil {
		return ctrl.Result{}, err
	}
	return p.reportCluster(ctx, req.NamespacedName)
}

// reportCluster stands in for Cluster API's core controller, which mirrors the
// infrastructure's and the control plane's readiness onto the Cluster.
func (p *Provider) reportCluster(ctx context.Context, key types.NamespacedName) (ctrl.Result, error) {
	cluster := &clusterv1.Cluster{}
	if err := p.Client.Get(ctx, key, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	patch := client.MergeFrom(cluster.DeepCopy())
	for _, t := range []string{clusterv1.ClusterInfrastructureReadyCondition, clusterv1.ClusterControlPlaneInitializedCondition,
		clusterv1.ClusterControlPlaneAvailableCondition} {
		apimeta.SetStatusCondition(&cluster.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "DevProvider"})
	}
	return ctrl.Result{}, p.Client.Status().Patch(ctx, cluster, patch)
}

// endpointFor returns the apiserver serving the KamajiControlPlane, the endpoint to
// report and, for a shared apiserver's view, the CA that endpoint serves with.
func (p *Provider) endpointFor(key types.NamespacedName, kcp *unstructured.Unstructured) (*devenv.Cluster, string, []byte, error) {
	if p.Shared <= 0 {
		t, err := p.ensureTenant(key)
		if err != nil {
			return nil, "", nil, err
		}
		return t, t.Config.Host, nil, nil
	}
	id, err := identityOf(kcp)
	if err != nil {
		return nil, "", nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	v, s, err := p.sharedFor(key, id)
	if err != nil {
		return nil, "", nil, err
	}
	return s.tenant, v.server.URL, v.caPEM, nil
}

// ensureTenant starts the KamajiControlPlane's apiserver once. Reconciles of one key
// never run at once, so the lock is not held while an apiserver starts: several planes
// come up side by side.
func (p *Provider) ensureTenant(key types.NamespacedName) (*devenv.Cluster, error) {
	if t := p.Tenant(key); t != nil {
		return t, nil
	}
	t, err := devenv.StartTenantWith(p.Scheme, p.TenantOptions)
	if err != nil {
		return nil, fmt.Errorf("starting the tenant apiserver of %s: %w", key, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tenants == nil {
		p.tenants = map[types.NamespacedName]*devenv.Cluster{}
	}
	p.tenants[key] = t
	return t, nil
}

// ensureAdminKubeconfig writes Kamaji's admin kubeconfig Secret once per tenant
// apiserver: a restarted apiserver gets new certificates, so a Secret from an earlier
// one is replaced, as Kamaji rotates it.
func (p *Provider) ensureAdminKubeconfig(ctx context.Context, tenant *devenv.Cluster, kcp *unstructured.Unstructured, host string, caPEM []byte) (string, error) {
	name := devenv.AdminKubeconfigSecretName(kcp.GetName())
	existing := &corev1.Secret{}
	err := p.Client.Get(ctx, client.ObjectKey{Namespace: kcp.GetNamespace(), Name: name}, existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	if err == nil && existing.Annotations[tenantAnnotation] == host {
		return name, nil
	}
	want, kerr := devenv.AdminKubeconfigSecret(tenant, kcp.GetNamespace(), kcp.GetName())
	if kerr != nil {
		return "", kerr
	}
	if caPEM != nil {
		if kerr := pointAt(want, host, caPEM); kerr != nil {
			return "", kerr
		}
	}
	metav1.SetMetaDataAnnotation(&want.ObjectMeta, tenantAnnotation, host)
	if apierrors.IsNotFound(err) {
		return name, p.Client.Create(ctx, want)
	}
	existing.Data = want.Data
	metav1.SetMetaDataAnnotation(&existing.ObjectMeta, tenantAnnotation, host)
	return name, p.Client.Update(ctx, existing)
}

const tenantAnnotation = "devprovider.computeplane.cozystack.io/apiserver"

func (p *Provider) reportTenantControlPlane(ctx context.Context, kcp *unstructured.Unstructured, version, secretName, endpoint string) error {
	tcp := &kamajiv1alpha1.TenantControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: kcp.GetNamespace(), Name: kcp.GetName()}}
	if _, err := controllerutil.CreateOrUpdate(ctx, p.Client, tcp, func() error {
		tcp.Spec.Kubernetes.Version = version
		tcp.Spec.Kubernetes.Kubelet.CGroupFS = "systemd"
		tcp.Spec.ControlPlane.Service.ServiceType = kamajiv1alpha1.ServiceTypeClusterIP
		return controllerutil.SetControllerReference(kcp, tcp, p.Scheme)
	}); err != nil {
		return err
	}
	patch := client.MergeFrom(tcp.DeepCopy())
	tcp.Status.Kubernetes.Version = kamajiv1alpha1.KubernetesVersion{Version: version, Status: ptr.To(kamajiv1alpha1.VersionReady)}
	tcp.Status.KubeConfig.Admin.SecretName = secretName
	tcp.Status.ControlPlaneEndpoint = endpoint
	return p.Client.Status().Patch(ctx, tcp, patch)
}

func (p *Provider) reportKamajiControlPlane(ctx context.Context, kcp *unstructured.Unstructured, version string, endpoint *url.URL) error {
	patch := client.MergeFrom(kcp.DeepCopy())
	replicas, _, _ := unstructured.NestedInt64(kcp.Object, "spec", "replicas")
	status := map[string]any{
		"ready":                       true,
		"initialization":              map[string]any{"controlPlaneInitialized": true},
		"externalManagedControlPlane": true,
		"version":                     version,
		"replicas":                    replicas,
		"readyReplicas":               replicas,
		"availableReplicas":           replicas,
		"upToDateReplicas":            replicas,
	}
	if err := unstructured.SetNestedMap(kcp.Object, status, "status"); err != nil {
		return err
	}
	if err := p.Client.Status().Patch(ctx, kcp, patch); err != nil {
		return err
	}
	// The provider also publishes the endpoint on the KamajiControlPlane's spec.
	patch = client.MergeFrom(kcp.DeepCopy())
	port, err := strconv.ParseInt(endpoint.Port(), 10, 32)
	if err != nil {
		return err
	}
	if err := unstructured.SetNestedMap(kcp.Object, map[string]any{"host": endpoint.Hostname(), "port": port}, "spec", "controlPlaneEndpoint"); err != nil {
		return err
	}
	return p.Client.Patch(ctx, kcp, patch)
}
