package controllers

import (
	"context"
	"fmt"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/netpol"
	"github.com/cozystack/computeplane/remote"
)

// +kubebuilder:rbac:groups=cilium.io,resources=ciliumnetworkpolicies,verbs=get;list;watch;create;patch;delete

// reconcileEgress applies the egress baseline CiliumNetworkPolicy next to the plane's VMs
// and reads it back. A baseline that was verified and is now missing or changed is
// reported Drifted first, and restored on the next pass.
func (r *ComputePlaneReconciler) reconcileEgress(ctx context.Context, s *scope) (ctrl.Result, error) {
	p, class := s.plane, s.class
	want := netpol.BaselinePolicy(netpol.Baseline{
		Namespace:    p.Status.InfrastructureNamespace,
		VMSelector:   map[string]string{cpv1.PlaneNameLabel: p.Name, cpv1.PlaneNamespaceLabel: p.Namespace},
		ControlPlane: render.ClusterName(p),
		Internet:     class.Spec.Egress.Internet == cpv1.InternetAllow,
		Labels:       render.PlaneLabels(p),
	})
	hash, err := remote.AppliedHash(want)
	if err != nil {
		return ctrl.Result{}, err
	}
	current, err := r.baselineMatches(ctx, r.Client, want, hash)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !current && apimeta.IsStatusConditionTrue(p.Status.Conditions, cpv1.EgressCondition) {
		r.Events.Eventf(p, nil, corev1.EventTypeWarning, DriftedReason, "Drift",
			"CiliumNetworkPolicy %s/%s was removed or changed", want.Namespace, want.Name)
		s.observe(cpv1.EgressCondition, stageFalse(DriftedReason,
			"CiliumNetworkPolicy %s/%s was removed or changed; restoring", want.Namespace, want.Name))
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	if !current {
		if _, err := remote.ApplyIfChanged(ctx, r.Client, want, FieldOwner); err != nil {
			return ctrl.Result{}, err
		}
		// Read back from the API, not the cache, which may not have seen the write yet.
		if current, err = r.baselineMatches(ctx, r.APIReader, want, hash); err != nil {
			return ctrl.Result{}, err
		}
		if !current {
			s.observe(cpv1.EgressCondition, stageFalse(NotVerifiedReason,
				"CiliumNetworkPolicy %s/%s is not as applied on read-back", want.Namespace, want.Name))
			s.waiting = true
			return ctrl.Result{RequeueAfter: r.jitter()}, nil
		}
	}
	internet := "denied"
	if class.Spec.Egress.Internet == cpv1.InternetAllow {
		internet = "allowed"
	}
	s.observe(cpv1.EgressCondition, stageTrue(cpv1.SucceededReason, fmt.Sprintf(
		"CiliumNetworkPolicy %s/%s: the management kube-apiserver and everything cluster-internal are denied but DNS and the plane's control plane; internet %s",
		want.Namespace, want.Name, internet)))
	return ctrl.Result{}, nil
}

func (r *ComputePlaneReconciler) baselineMatches(ctx context.Context, c client.Reader, want *ciliumv2.CiliumNetworkPolicy, hash string) (bool, error) {
	live := &ciliumv2.CiliumNetworkPolicy{}
	err := c.Get(ctx, client.ObjectKeyFromObject(want), live)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return live.DeletionTimestamp.IsZero() && live.Annotations[remote.AppliedHashAnnotation] == hash, nil
}
