package computeplane

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/netpol"
	"github.com/cozystack/computeplane/ssa"
)

// +kubebuilder:rbac:groups="",resources=services,verbs=list;watch

// reconcileGrants turns the plane's Service grants into its grant policy and reads it
// back. A grant exists only when both sides agree: the plane asks (spec.serviceAccess,
// with ports) and the Service, in the plane's own namespace, opts in (labelled
// computeplane.cozystack.io/plane-access=<plane>). The policy is exactly the granted
// set, never wider: a Service that opts out or goes is revoked by the next write. Pending
// and refused grants open nothing, so they do not hold the gate; each is reported in
// status.serviceAccess with its reason. A verified policy found changed (not by a change
// of grants) is reported Drifted, then restored.
func (r *Reconciler) reconcileGrants(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.plane
	key := client.ObjectKeyFromObject(p)
	statuses, grants, err := r.grants(ctx, p, s.class)
	if err != nil {
		return ctrl.Result{}, err
	}
	p.Status.ServiceAccess = statuses
	name := netpol.GrantsName(p.Name, string(p.UID))
	ns := p.Status.InfrastructureNamespace
	want := netpol.GrantsPolicy(netpol.Grants{
		Name: name, Namespace: ns, VMSelector: render.PlaneSelector(p), Grants: grants,
		Labels: withLabel(render.PlaneLabels(p), cpv1.PolicyRoleLabel, "grants"),
	})
	summary := grantSummary(statuses)
	if want == nil {
		live := &ciliumv2.CiliumNetworkPolicy{}
		switch err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, live); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return ctrl.Result{}, err
		case live.Labels[cpv1.PlaneUIDLabel] == string(p.UID):
			if err := client.IgnoreNotFound(r.Delete(ctx, live)); err != nil {
				return ctrl.Result{}, err
			}
		}
		r.grantsApplied(key, "")
		s.observe(cpv1.NetworkPoliciesCondition, stageTrue(cpv1.SucceededReason, "No Service is granted, so the plane reaches none; "+summary))
		return ctrl.Result{}, nil
	}

	hash, err := ssa.AppliedHash(want)
	if err != nil {
		return ctrl.Result{}, err
	}
	c := r.policiesConvergence(cpv1.NetworkPoliciesCondition, []*ciliumv2.CiliumNetworkPolicy{want})
	// A policy that differs while the grants changed is the operator's update; with the
	// grants as last applied, someone else's hand.
	c.ownChange = func() bool { return r.lastGrantsApplied(key) != hash }
	if res, done, err := r.converge(ctx, s, c); !done {
		return res, err
	}
	r.grantsApplied(key, hash)
	r.setVerified(key, cpv1.NetworkPoliciesCondition, true)
	s.observe(cpv1.NetworkPoliciesCondition, stageTrue(cpv1.SucceededReason, fmt.Sprintf(
		"CiliumNetworkPolicy %s/%s: %s", ns, name, summary)))
	return ctrl.Result{}, nil
}

// grants decides every requested Service access of the plane: granted (with its
// backend ports), pending or refused, each with its reason.
func (r *Reconciler) grants(ctx context.Context, p *cpv1.ComputePlane, class *cpv1.ComputePlaneClass) ([]cpv1.ServiceAccessStatus, []netpol.Grant, error) {
	requests := append([]cpv1.ServiceAccess(nil), p.Spec.ServiceAccess...)
	sort.Slice(requests, func(i, j int) bool { return requests[i].Name < requests[j].Name })
	var statuses []cpv1.ServiceAccessStatus
	var grants []netpol.Grant
	for _, req := range requests {
		svc := &corev1.Service{}
		err := r.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: req.Name}, svc)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, err
		}
		if apierrors.IsNotFound(err) {
			svc = nil
		}
		st, g := decideGrant(p, class, req, svc)
		statuses = append(statuses, st)
		if g != nil {
			grants = append(grants, *g)
		}
	}
	return statuses, grants, nil
}

// decideGrant is the contract for one requested Service. It is pure.
func decideGrant(p *cpv1.ComputePlane, class *cpv1.ComputePlaneClass, req cpv1.ServiceAccess, svc *corev1.Service) (cpv1.ServiceAccessStatus, *netpol.Grant) {
	st := cpv1.ServiceAccessStatus{Name: req.Name}
	pending := func(format string, args ...any) (cpv1.ServiceAccessStatus, *netpol.Grant) {
		st.State, st.Message = cpv1.GrantPending, fmt.Sprintf(format, args...)
		return st, nil
	}
	refused := func(format string, args ...any) (cpv1.ServiceAccessStatus, *netpol.Grant) {
		st.State, st.Message = cpv1.GrantRefused, fmt.Sprintf(format, args...)
		return st, nil
	}
	switch {
	case svc == nil:
		// Only opted-in Services are cached: absent here is "missing or not opted in".
		return pending("Service %s/%s does not exist or has not opted in: its owner grants access by labelling it %s=%s", p.Namespace, req.Name, cpv1.ServiceAccessLabel, p.Name)
	case svc.Labels[cpv1.ServiceAccessLabel] != p.Name:
		return pending("Service %s/%s has not opted in: its owner grants access by labelling it %s=%s", p.Namespace, req.Name, cpv1.ServiceAccessLabel, p.Name)
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return refused("Service %s is an ExternalName Service: it names an address outside the cluster's control", req.Name)
	case len(svc.Spec.Selector) == 0 && (class == nil || !class.Spec.Egress.AllowSelectorlessServices):
		return refused("Service %s has no selector: its endpoints are written by hand and may point anywhere, and the class does not allow such Services", req.Name)
	}
	for k := range svc.Spec.Selector {
		if netpol.ReservedSelectorKey(k) {
			return refused("Service %s selects on %q, which Cilium reads as more than a pod label", req.Name, k)
		}
	}
	g := &netpol.Grant{Service: req.Name, Namespace: p.Namespace, Selector: svc.Spec.Selector}
	var opened []string
	for _, want := range req.Ports {
		sp := servicePort(svc, want)
		if sp == nil {
			return refused("Service %s does not expose %d/%s (it exposes %s)", req.Name, want.Port, want.Protocol, exposed(svc))
		}
		target := strconv.Itoa(int(sp.Port))
		switch {
		case sp.TargetPort.StrVal != "":
			target = sp.TargetPort.StrVal
		case sp.TargetPort.IntVal > 0:
			target = strconv.Itoa(int(sp.TargetPort.IntVal))
		}
		g.Ports = append(g.Ports, netpol.Port{Port: target, Protocol: want.Protocol})
		opened = append(opened, fmt.Sprintf("%d/%s→%s", want.Port, want.Protocol, target))
	}
	st.State, st.Message = cpv1.GrantGranted, "backends reachable on "+strings.Join(opened, ", ")
	return st, g
}

func servicePort(svc *corev1.Service, want cpv1.ServicePort) *corev1.ServicePort {
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		protocol := string(sp.Protocol)
		if protocol == "" {
			protocol = string(corev1.ProtocolTCP)
		}
		if sp.Port == want.Port && protocol == want.Protocol {
			return sp
		}
	}
	return nil
}

func exposed(svc *corev1.Service) string {
	var out []string
	for _, sp := range svc.Spec.Ports {
		out = append(out, fmt.Sprintf("%d/%s", sp.Port, sp.Protocol))
	}
	if len(out) == 0 {
		return "no port"
	}
	return strings.Join(out, ", ")
}

// grantSummary names the granted, pending and refused Services.
func grantSummary(statuses []cpv1.ServiceAccessStatus) string {
	by := map[cpv1.GrantState][]string{}
	for _, st := range statuses {
		by[st.State] = append(by[st.State], st.Name)
	}
	part := func(state cpv1.GrantState, what string) string {
		if len(by[state]) == 0 {
			return ""
		}
		return fmt.Sprintf("%d %s (%s)", len(by[state]), what, strings.Join(by[state], ", "))
	}
	var parts []string
	for _, p := range []string{part(cpv1.GrantGranted, "granted"), part(cpv1.GrantPending, "pending"), part(cpv1.GrantRefused, "refused")} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "no Service access requested"
	}
	return strings.Join(parts, "; ") + " (status.serviceAccess says why)"
}

// grantsApplied remembers the hash of the grant policy last applied to the plane, to
// tell a change of grants (an update) from someone else's change (drift).
func (r *Reconciler) grantsApplied(key client.ObjectKey, hash string) {
	r.state.with(key, func(s *planeState) { s.grantsHash = hash })
}

func (r *Reconciler) lastGrantsApplied(key client.ObjectKey) (hash string) {
	r.state.peek(key, func(s *planeState) {
		if s != nil {
			hash = s.grantsHash
		}
	})
	return hash
}
