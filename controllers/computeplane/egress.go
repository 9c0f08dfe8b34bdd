package computeplane

import (
	"context"
	"fmt"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/netpol"
)

// +kubebuilder:rbac:groups=cilium.io,resources=ciliumnetworkpolicies,verbs=get;list;watch;create;patch;delete

// reconcileEgress applies the plane's egress baseline and its infrastructure
// namespace's default deny, and reads both back; their specs must be exactly as
// generated (an added selector expression or a disabled default deny is a change). A
// policy that was verified and is now missing or changed is reported Drifted first, and
// restored on the next pass.
func (r *Reconciler) reconcileEgress(ctx context.Context, s *scope) (ctrl.Result, error) {
	p, class := s.plane, s.class
	ns := p.Status.InfrastructureNamespace
	wants := []*ciliumv2.CiliumNetworkPolicy{defaultDenyPolicy(s, ns), baselinePolicy(s, ns)}

	if res, done, err := r.converge(ctx, s, r.policiesConvergence(cpv1.EgressCondition, wants)); !done {
		return res, err
	}
	r.setVerified(client.ObjectKeyFromObject(p), cpv1.EgressCondition, true)
	internet := "denied"
	if class.Spec.Egress.Internet == cpv1.InternetAllow {
		internet = "allowed"
	}
	s.observe(cpv1.EgressCondition, stageTrue(cpv1.SucceededReason, fmt.Sprintf(
		"CiliumNetworkPolicies %s/%s and %s: the plane's VMs reach DNS and their own control plane, never the management kube-apiserver nor anything else cluster-internal; internet %s",
		ns, wants[1].Name, wants[0].Name, internet)))
	return ctrl.Result{}, nil
}

// policiesConvergence keeps management-side CiliumNetworkPolicies exactly as generated:
// compared with the informers' copy, restored by server-side apply, read back from the
// API server itself (the cache may not have seen the writes yet).
func (r *Reconciler) policiesConvergence(stage string, wants []*ciliumv2.CiliumNetworkPolicy) convergence {
	var changed []*ciliumv2.CiliumNetworkPolicy
	return convergence{
		stage: stage,
		look: func(ctx context.Context) ([]string, error) {
			var err error
			changed, err = r.unverifiedPolicies(ctx, r.Client, wants)
			return describePolicies(changed), err
		},
		restore: func(ctx context.Context) error {
			for _, want := range changed {
				if _, err := r.comparisons().Apply(ctx, r.Client, want, FieldOwner, "spec"); err != nil {
					return err
				}
			}
			return nil
		},
		readBack: func(ctx context.Context) ([]string, error) {
			still, err := r.unverifiedPolicies(ctx, r.APIReader, changed)
			return describePolicies(still), err
		},
		notAsApplied: cpv1.NotVerifiedReason,
	}
}

func (r *Reconciler) unverifiedPolicies(ctx context.Context, c client.Reader, wants []*ciliumv2.CiliumNetworkPolicy) ([]*ciliumv2.CiliumNetworkPolicy, error) {
	var out []*ciliumv2.CiliumNetworkPolicy
	for _, want := range wants {
		ok, err := r.comparisons().Verify(ctx, c, want, "spec")
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, want)
		}
	}
	return out, nil
}

func describePolicies(ps []*ciliumv2.CiliumNetworkPolicy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = "CiliumNetworkPolicy " + p.Namespace + "/" + p.Name
	}
	return out
}

// baselinePolicy is the plane's own egress baseline, named per plane and selecting its
// VMs by the labels (UID included) the operator puts on their template.
func baselinePolicy(s *scope, ns string) *ciliumv2.CiliumNetworkPolicy {
	p := s.plane
	return netpol.BaselinePolicy(netpol.Baseline{
		Name:         netpol.BaselineName(p.Name, string(p.UID)),
		Namespace:    ns,
		VMSelector:   render.PlaneSelector(p),
		ControlPlane: render.ClusterName(p),
		Internet:     s.class.Spec.Egress.Internet == cpv1.InternetAllow,
		DeniedCIDRs:  s.class.Spec.Egress.DeniedCIDRs,
		Labels:       withLabel(render.PlaneLabels(p), cpv1.PolicyRoleLabel, "egress-baseline"),
	})
}

// defaultDenyPolicy is the infrastructure namespace's default deny. It carries no plane
// labels: it belongs to the namespace, not to any one plane.
func defaultDenyPolicy(s *scope, ns string) *ciliumv2.CiliumNetworkPolicy {
	return netpol.DefaultDeny(ns, map[string]string{
		cpv1.ManagedByLabel:  cpv1.ManagedByValue,
		cpv1.PolicyRoleLabel: "default-deny",
	})
}

func withLabel(labels map[string]string, key, value string) map[string]string {
	labels[key] = value
	return labels
}
