package capistandin

import (
	"context"
	"time"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv/vm"
)

// Start runs the stand-ins in a manager of their own with cfg's rights (an
// administrator's: they are other components than the operator), until ctx ends or the
// returned stop is called.
func Start(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (stop func(), err error) {
	return StartWith(ctx, cfg, scheme, Options{})
}

// Options choose the stand-ins.
type Options struct {
	// RealCore says Cluster API's real core manager runs (devenv.StartClusterAPI): the
	// Cluster stand-in does not.
	RealCore bool
	// VMs, when set, runs the KubevirtMachines' VMs (CAPK's machine controller); with no
	// VMs, machines are not stood in for.
	VMs *vm.Host
	// Autoscaler runs the cluster-autoscaler stand-in (autoscaler.go) for the autoscaler
	// Deployments the operator renders.
	Autoscaler bool
	// AutoscalerFailed, when set, hears each new error of an autoscaler's scan (the real
	// one logs them), with the Deployment's namespace/name.
	AutoscalerFailed func(deployment string, err error)
}

// StartWith is Start with a choice of stand-ins.
func StartWith(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, o Options) (stop func(), err error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		return nil, err
	}
	c := mgr.GetClient()
	kcps := &kamajiControlPlanes{client: c}
	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(render.KubevirtAPIVersion)
	infra.SetKind(render.KubevirtClusterKind)
	opts := controller.Options{MaxConcurrentReconciles: 4}
	if err := ctrl.NewControllerManagedBy(mgr).Named("kamajicontrolplane").WithOptions(opts).
		// The provider reconciles only KamajiControlPlanes Cluster API owns.
		For(newKCP(), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return len(o.GetOwnerReferences()) > 0 }))).
		Owns(&kamajiv1alpha1.TenantControlPlane{}).
		Owns(&corev1.Secret{}).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToControlPlane)).
		Complete(kcps); err != nil {
		return nil, err
	}
	if !o.RealCore {
		if err := ctrl.NewControllerManagedBy(mgr).Named("cluster").WithOptions(opts).
			For(&clusterv1.Cluster{}).
			Watches(newKCP(), handler.EnqueueRequestsFromMapFunc(ownedToCluster)).
			Watches(infra, handler.EnqueueRequestsFromMapFunc(ownedToCluster)).
			Complete(&clusters{client: c, mapper: mgr.GetRESTMapper()}); err != nil {
			return nil, err
		}
	}
	if o.VMs != nil {
		machines := &kubevirtMachines{client: c, host: o.VMs}
		if err := ctrl.NewControllerManagedBy(mgr).Named("kubevirtmachine").WithOptions(opts).
			For(newKubevirtMachine()).
			Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToKubevirtMachine)).
			Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(machines.clusterToKubevirtMachines)).
			Complete(machines); err != nil {
			return nil, err
		}
	}
	if o.Autoscaler {
		if err := mgr.Add(&autoscalers{admin: c, cfg: cfg, scheme: scheme, failed: o.AutoscalerFailed, last: map[types.UID]time.Time{},
			told: map[string]string{}, errs: map[types.UID]error{}}); err != nil {
			return nil, err
		}
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("garbagecollector").WithOptions(opts).
		For(&kamajiv1alpha1.TenantControlPlane{}).
		// The provider names the TenantControlPlane after its KamajiControlPlane.
		Watches(newKCP(), &handler.EnqueueRequestForObject{}).
		Complete(&collector{client: c, apiReader: mgr.GetAPIReader()}); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(runCtx) }()
	return func() { cancel(); <-done }, nil
}

// collector plays the garbage collector for a TenantControlPlane whose controlling
// KamajiControlPlane is gone (the provider sets that controller reference): it is deleted
// in the background, and Kamaji's finalizers then clean its datastore up. Kamaji's own
// objects (its Deployment, which the pod runner collects, Service and Secrets) are left.
type collector struct {
	client    client.Client
	apiReader client.Reader
}

func (r *collector) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tcp := &kamajiv1alpha1.TenantControlPlane{}
	if err := r.client.Get(ctx, req.NamespacedName, tcp); err != nil || !tcp.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	owner := metav1.GetControllerOf(tcp)
	if owner == nil || owner.Kind != render.KamajiControlPlaneKind {
		return ctrl.Result{}, nil
	}
	kcp := newKCP()
	err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: tcp.Namespace, Name: owner.Name}, kcp)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return ctrl.Result{}, err
	case kcp.GetUID() == owner.UID && kcp.GetDeletionTimestamp().IsZero():
		return ctrl.Result{}, nil
	case kcp.GetUID() == owner.UID:
		// Foreground deletion of the owner waits for its dependents; background
		// (what Cluster API asks) lets it go first. Either way the dependent goes.
	}
	return ctrl.Result{}, client.IgnoreNotFound(r.client.Delete(ctx, tcp, client.PropagationPolicy(metav1.DeletePropagationBackground)))
}
