package computeplane

import (
	"context"
	"fmt"
	"net"
	"strings"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/controllers/tenancy"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/ssa"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machinedeployments,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machinesets,verbs=list;watch
// get: the cache holds these without their content (ContentlessKinds); a comparison
// reads a version it does not remember from the API server.
// +kubebuilder:rbac:groups=controlplane.cluster.x-k8s.io,resources=kamajicontrolplanes,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=kubevirtclusters;kubevirtmachinetemplates,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=bootstrap.cluster.x-k8s.io,resources=kubeadmconfigtemplates,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=kamaji.clastix.io,resources=tenantcontrolplanes,verbs=list;watch
// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch;create;patch;delete

// reconcileProvisioning renders the plane's Cluster API graph into its infrastructure
// namespace (server-side apply, skipped when unchanged), removes what the spec no longer
// asks for, and reports how far the providers have come.
func (r *Reconciler) reconcileProvisioning(ctx context.Context, s *scope) (ctrl.Result, error) {
	p, class := s.plane, s.class
	infraNS := render.InfrastructureNamespace(p, class)
	// Before the infrastructure namespace is recorded: that tells a plane provisioned
	// before its DataStore was recorded from a new one.
	p.Status.DataStoreName = tenancy.DataStoreFor(p, class, s.namespaceLabels)
	p.Status.InfrastructureNamespace = infraNS

	before, err := r.observeProviders(ctx, s, infraNS, false)
	if err != nil {
		return ctrl.Result{}, err
	}
	graph, err := render.Plane(p, class, before.workerVersion(class.Spec.KubernetesVersion))
	if err != nil {
		s.observe(cpv1.ProvisionedCondition, stageInvalid(cpv1.RenderFailedReason, "%v; fix the spec", err))
		return ctrl.Result{}, nil
	}

	if conflict, err := r.ensureInfraNamespace(ctx, s, graph.Namespace); err != nil || conflict != "" {
		if conflict != "" {
			s.observe(cpv1.ProvisionedCondition, stageTerminal(cpv1.InfrastructureConflictReason, "%s", conflict))
		}
		return ctrl.Result{RequeueAfter: r.jitter()}, err
	}
	// Before anything that makes VMs: the namespace's always-on default deny.
	if err := r.ensureDefaultDeny(ctx, s, infraNS); err != nil {
		return ctrl.Result{}, err
	}
	var restored []string
	applier := r.withAddons()
	for _, obj := range graph.Objects {
		res, err := r.comparisons().Apply(ctx, applier, obj, FieldOwner)
		if err != nil {
			return ctrl.Result{}, err
		}
		if res == ssa.Restored {
			restored = append(restored, fmt.Sprintf("%s %s/%s", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName()))
		}
	}
	if len(restored) > 0 {
		driftRepairs.WithLabelValues(cpv1.ProvisionedCondition).Add(float64(len(restored)))
		r.Events.Eventf(p, nil, corev1.EventTypeWarning, cpv1.DriftedReason, "Drift",
			"Restored what someone changed in %s", strings.Join(restored, ", "))
	}
	if err := r.pruneNodeGroups(ctx, s, graph); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.pruneHealthChecks(ctx, s, graph); err != nil {
		return ctrl.Result{}, err
	}

	// Read again: the applies may have created what the first look did not find.
	obs, err := r.observeProviders(ctx, s, infraNS, true)
	if err != nil {
		return ctrl.Result{}, err
	}
	res := provisioningResult(obs)
	s.observe(cpv1.ProvisionedCondition, res)
	if obs.tcp != nil {
		p.Status.Endpoint = obs.tcp.Status.ControlPlaneEndpoint
		p.Status.Version = obs.tcp.Status.Kubernetes.Version.Version
	}
	if res.status != metav1.ConditionTrue && (res.reason == cpv1.WaitingForKubeconfigReason || res.reason == cpv1.KubeconfigUnusableReason) {
		// Kamaji writes the Secret before it updates its status, and Secrets are not
		// watched (the operator never caches Secrets cluster-wide): look again soon.
		s.waiting = true
		return ctrl.Result{RequeueAfter: r.jitter()}, nil
	}
	s.admin = obs.credential
	return ctrl.Result{}, nil
}

// ensureInfraNamespace creates the dedicated namespace, marked with the plane's UID, or
// finds it marked so. A namespace without the mark is never used, labelled or deleted:
// it returns why, for a person to act on.
func (r *Reconciler) ensureInfraNamespace(ctx context.Context, s *scope, want *corev1.Namespace) (string, error) {
	live := &corev1.Namespace{}
	err := r.Get(ctx, client.ObjectKeyFromObject(want), live)
	if apierrors.IsNotFound(err) {
		create := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: want.Name, Labels: want.Labels}}
		err = r.Create(ctx, create, client.FieldOwner(FieldOwner))
		if !apierrors.IsAlreadyExists(err) {
			return "", err
		}
		// The cache had not seen it (our own create a moment ago, or someone's): look
		// at the API itself.
		err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), live)
	}
	switch {
	case err != nil:
		return "", err
	case live.Labels[cpv1.PlaneUIDLabel] != string(s.plane.UID):
		return fmt.Sprintf("namespace %s was not created for this ComputePlane (its %s label is %q); the operator never adopts a namespace: a platform operator must check what it holds and delete or rename it",
			want.Name, cpv1.PlaneUIDLabel, live.Labels[cpv1.PlaneUIDLabel]), nil
	}
	// Ours: keep its labels as rendered (Pod Security for the VMs, the plane's links).
	_, err = r.comparisons().Apply(ctx, r.Client, want, FieldOwner)
	return "", err
}

// ensureDefaultDeny creates the namespace's always-on default deny if it is missing.
// Its content is verified (and a change reported as drift) by the egress stage.
func (r *Reconciler) ensureDefaultDeny(ctx context.Context, s *scope, ns string) error {
	want := defaultDenyPolicy(s, ns)
	err := r.Get(ctx, client.ObjectKeyFromObject(want), &ciliumv2.CiliumNetworkPolicy{})
	if apierrors.IsNotFound(err) {
		// The cache may not have seen our own create yet.
		err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), &ciliumv2.CiliumNetworkPolicy{})
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	_, err = r.comparisons().Apply(ctx, r.Client, want, FieldOwner, "spec")
	return err
}

// providerObservation is what the providers report about a plane.
type providerObservation struct {
	cluster          *clusterv1.Cluster
	tcp              *kamajiv1alpha1.TenantControlPlane
	kubeconfigSecret string
	// kubeconfigMissing says why there is nothing to use yet; kubeconfigUnusable why
	// what Kamaji wrote is refused.
	kubeconfigMissing  string
	kubeconfigUnusable string
	credential         *remote.AdminCredential
	machineDeploys     []clusterv1.MachineDeployment
	addons             []helmv2.HelmRelease
}

// observeProviders reads what the providers report; withKubeconfig also reads and checks
// the admin kubeconfig Secret (a direct read, so only once per reconcile).
func (r *Reconciler) observeProviders(ctx context.Context, s *scope, ns string, withKubeconfig bool) (*providerObservation, error) {
	name := render.ClusterName(s.plane)
	obs := &providerObservation{}
	cluster := &clusterv1.Cluster{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cluster); {
	case err == nil:
		obs.cluster = cluster
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	tcp := &kamajiv1alpha1.TenantControlPlane{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tcp); {
	case err == nil:
		obs.tcp = tcp
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	var mds clusterv1.MachineDeploymentList
	if err := r.List(ctx, &mds, client.InNamespace(ns), client.MatchingLabels{cpv1.ClusterNameLabel: name}); err != nil {
		return nil, err
	}
	obs.machineDeploys = mds.Items
	addons, err := r.addonReleases(ctx, ns, s.planeSelector())
	if err != nil {
		return nil, err
	}
	obs.addons = addons

	if withKubeconfig && obs.tcp != nil && obs.tcp.Status.KubeConfig.Admin.SecretName != "" {
		obs.kubeconfigSecret = obs.tcp.Status.KubeConfig.Admin.SecretName
		secret := &corev1.Secret{}
		err := r.secretsIn(ctx, ns, s).get(obs.kubeconfigSecret, secret)
		switch {
		case apierrors.IsNotFound(err):
			obs.kubeconfigMissing = "does not exist yet"
		case err != nil:
			return nil, err
		case len(secret.Data[render.AdminKubeconfigKey]) == 0:
			obs.kubeconfigMissing = "has no key " + render.AdminKubeconfigKey + " yet"
		default:
			cred, perr := r.adminCredential(client.ObjectKeyFromObject(s.plane), secret.Data[render.AdminKubeconfigKey], controlPlaneServers(obs.tcp))
			if perr != nil {
				obs.kubeconfigUnusable = "key " + render.AdminKubeconfigKey + " " + perr.Error()
			}
			obs.credential = cred
		}
	}
	return obs, nil
}

// workerVersion applies render.WorkerVersion to what the providers report.
func (o *providerObservation) workerVersion(classVersion string) string {
	cpVersion, cpReady := "", false
	if o.tcp != nil {
		v := o.tcp.Status.Kubernetes.Version
		cpVersion = v.Version
		cpReady = v.Status != nil && *v.Status == kamajiv1alpha1.VersionReady
	}
	workers := make([]string, 0, len(o.machineDeploys))
	for _, md := range o.machineDeploys {
		workers = append(workers, md.Spec.Template.Spec.Version)
	}
	return render.WorkerVersion(classVersion, cpVersion, cpReady, workers)
}

// controlPlaneServers are the addresses the TenantControlPlane itself reports for its
// API server: its endpoint, and its Service's in-cluster names (Kamaji's .svc
// kubeconfigs use https://<name>.<namespace>.svc:<port>). The admin kubeconfig may point
// nowhere else.
func controlPlaneServers(tcp *kamajiv1alpha1.TenantControlPlane) []string {
	var out []string
	if ep := endpointHostPort(tcp.Status.ControlPlaneEndpoint); ep != "" {
		out = append(out, "https://"+ep)
	}
	port := tcp.Spec.NetworkProfile.Port
	if port == 0 {
		port = 6443
	}
	for _, domain := range []string{"svc", "svc.cluster.local"} {
		out = append(out, fmt.Sprintf("https://%s.%s.%s:%d", tcp.Name, tcp.Namespace, domain, port))
	}
	return out
}

// endpointHostPort is a TenantControlPlane's status.controlPlaneEndpoint as a URL's
// host:port. Kamaji v1.0.0 writes "<address>:<port>" (internal/resources/
// k8s_service_resource.go), so an IPv6 address comes unbracketed; a kubeconfig names it
// bracketed. Anything else is returned as it is.
func endpointHostPort(ep string) string {
	if _, _, err := net.SplitHostPort(ep); err == nil {
		return ep
	}
	i := strings.LastIndexByte(ep, ':')
	if i < 0 || net.ParseIP(ep[:i]) == nil {
		return ep
	}
	return net.JoinHostPort(ep[:i], ep[i+1:])
}

// pruneNodeGroups deletes MachineDeployments of node groups that are gone, and machine
// and bootstrap templates that neither the current graph nor any MachineSet uses
// (a rolled template stays until CAPI has replaced the machines built from it).
func (r *Reconciler) pruneNodeGroups(ctx context.Context, s *scope, graph *render.Graph) error {
	ns := s.plane.Status.InfrastructureNamespace
	planeSel := s.planeSelector()
	wantMD, wantInfra, wantBoot := sets.New[string](), sets.New[string](), sets.New[string]()
	for _, g := range graph.NodeGroups {
		wantMD.Insert(g.MachineDeployment.Name)
		wantInfra.Insert(g.MachineTemplate.GetName())
		wantBoot.Insert(g.BootstrapTemplate.Name)
	}

	var mds clusterv1.MachineDeploymentList
	if err := r.List(ctx, &mds, client.InNamespace(ns), planeSel); err != nil {
		return err
	}
	for i := range mds.Items {
		if md := &mds.Items[i]; !wantMD.Has(md.Name) && md.DeletionTimestamp.IsZero() {
			if err := client.IgnoreNotFound(r.Delete(ctx, md)); err != nil {
				return err
			}
		}
	}

	var machineSets clusterv1.MachineSetList
	if err := r.List(ctx, &machineSets, client.InNamespace(ns),
		client.MatchingLabels{cpv1.ClusterNameLabel: render.ClusterName(s.plane)}); err != nil {
		return err
	}
	for _, ms := range machineSets.Items {
		wantInfra.Insert(ms.Spec.Template.Spec.InfrastructureRef.Name)
		wantBoot.Insert(ms.Spec.Template.Spec.Bootstrap.ConfigRef.Name)
	}
	for _, kind := range []struct {
		list schema.GroupVersionKind
		keep sets.Set[string]
	}{
		{schema.GroupVersionKind{Group: render.InfrastructureGroup, Version: "v1alpha1", Kind: render.KubevirtTemplateKind + "List"}, wantInfra},
		{bootstrapv1.GroupVersion.WithKind("KubeadmConfigTemplateList"), wantBoot},
	} {
		items, err := ListOwned(ctx, r.Client, kind.list, ns, planeSel)
		if err != nil {
			return err
		}
		for _, t := range items {
			if !kind.keep.Has(t.GetName()) && t.GetDeletionTimestamp().IsZero() {
				if err := client.IgnoreNotFound(r.Delete(ctx, t)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// provisioningResult reads the providers' status in the order a plane comes up. Node
// groups are reported but never block: a group scaled to zero has no nodes to wait for.
func provisioningResult(o *providerObservation) stageResult {
	if o.cluster == nil {
		return stageFalse(cpv1.WaitingForInfrastructureReason, "Cluster API has not picked up the Cluster yet")
	}
	if c := apimeta.FindStatusCondition(o.cluster.Status.Conditions, clusterv1.ClusterInfrastructureReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
		return stageFalse(cpv1.WaitingForInfrastructureReason, "KubevirtCluster %s is not ready%s", o.cluster.Name, detail(c))
	}
	if o.tcp == nil {
		return stageFalse(cpv1.WaitingForControlPlaneReason, "Kamaji has not created TenantControlPlane %s yet", o.cluster.Name)
	}
	if st := o.tcp.Status.Kubernetes.Version.Status; st == nil || *st != kamajiv1alpha1.VersionReady {
		phase := "Provisioning"
		if st != nil {
			phase = string(*st)
		}
		return stageFalse(cpv1.WaitingForControlPlaneReason, "TenantControlPlane %s is %s", o.tcp.Name, phase)
	}
	if c := apimeta.FindStatusCondition(o.cluster.Status.Conditions, clusterv1.ClusterControlPlaneInitializedCondition); c == nil || c.Status != metav1.ConditionTrue {
		return stageFalse(cpv1.WaitingForControlPlaneReason, "Cluster API does not report the control plane of Cluster %s initialized yet%s", o.cluster.Name, detail(c))
	}
	if o.kubeconfigSecret == "" {
		return stageFalse(cpv1.WaitingForKubeconfigReason, "TenantControlPlane %s names no admin kubeconfig Secret yet", o.tcp.Name)
	}
	if o.kubeconfigMissing != "" {
		return stageFalse(cpv1.WaitingForKubeconfigReason, "admin kubeconfig Secret %s %s", o.kubeconfigSecret, o.kubeconfigMissing)
	}
	if o.kubeconfigUnusable != "" {
		return stageFalse(cpv1.KubeconfigUnusableReason, "admin kubeconfig Secret %s %s; nothing was sent to the plane. Kamaji writes a usable one; look for what changed it",
			o.kubeconfigSecret, o.kubeconfigUnusable)
	}
	return stageTrue(cpv1.SucceededReason, fmt.Sprintf("Control plane %s is up at %s; %s; %s",
		o.tcp.Status.Kubernetes.Version.Version, o.tcp.Status.ControlPlaneEndpoint,
		nodeGroupSummary(o.machineDeploys), addonSummary(o.addons)))
}

// addonSummary reports the system add-ons' Flux readiness. It does not block
// provisioning: the add-ons need the plane's API, which is what Provisioned establishes;
// the stages that need a working pod network wait on them.
func addonSummary(hrs []helmv2.HelmRelease) string {
	if len(hrs) == 0 {
		return "no add-ons"
	}
	parts := make([]string, 0, len(hrs))
	for _, hr := range hrs {
		name := hr.Spec.ReleaseName
		if c := apimeta.FindStatusCondition(hr.Status.Conditions, fluxmeta.ReadyCondition); c != nil && c.Status == metav1.ConditionTrue {
			parts = append(parts, name+" ready")
		} else {
			parts = append(parts, name+" not ready"+detail(c))
		}
	}
	return "add-ons: " + strings.Join(parts, ", ")
}

func nodeGroupSummary(mds []clusterv1.MachineDeployment) string {
	if len(mds) == 0 {
		return "no node groups"
	}
	parts := make([]string, 0, len(mds))
	for _, md := range mds {
		available := ptr.Deref(md.Status.AvailableReplicas, 0)
		size := fmt.Sprintf("of %d", ptr.Deref(md.Spec.Replicas, 0))
		if lo, hi := md.Annotations[cpv1.AutoscalerMinSizeAnnotation], md.Annotations[cpv1.AutoscalerMaxSizeAnnotation]; hi != "" {
			size = "autoscaled " + lo + "-" + hi
		}
		parts = append(parts, fmt.Sprintf("%s %d available (%s)", md.Labels[cpv1.NodeGroupLabel], available, size))
	}
	return "node groups: " + strings.Join(parts, ", ")
}

func detail(c *metav1.Condition) string {
	if c == nil || c.Message == "" {
		return ""
	}
	return ": " + c.Message
}

// healthCheckKinds are the (list) kinds of the node groups' health checks.
var healthCheckKinds = []schema.GroupVersionKind{clusterv1.GroupVersion.WithKind("MachineHealthCheckList")}

// pruneHealthChecks deletes the health checks of node groups that are gone.
func (r *Reconciler) pruneHealthChecks(ctx context.Context, s *scope, graph *render.Graph) error {
	keep := sets.New[string]()
	for _, g := range graph.NodeGroups {
		keep.Insert(g.HealthCheck.Name)
	}
	return r.deleteOwned(ctx, s, healthCheckKinds, keep)
}

// deleteOwned deletes the plane's objects of kinds in its infrastructure namespace whose
// names keep does not hold.
func (r *Reconciler) deleteOwned(ctx context.Context, s *scope, kinds []schema.GroupVersionKind, keep sets.Set[string]) error {
	ns := s.plane.Status.InfrastructureNamespace
	if ns == "" {
		return nil
	}
	for _, gvk := range kinds {
		items, err := ListOwned(ctx, r.Client, gvk, ns, s.planeSelector())
		if err != nil {
			return err
		}
		for _, o := range items {
			if keep.Has(o.GetName()) || !o.GetDeletionTimestamp().IsZero() {
				continue
			}
			if err := client.IgnoreNotFound(r.Delete(ctx, o)); err != nil {
				return err
			}
		}
	}
	return nil
}
