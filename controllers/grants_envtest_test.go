package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	"github.com/cilium/cilium/pkg/policy/api"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/netpol"
)

func service(ns, name string, optIn string, selector map[string]string, ports ...int32) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Selector: selector}}
	if optIn != "" {
		s.Labels = map[string]string{cpv1.ServiceAccessLabel: optIn}
	}
	for _, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Port: p, TargetPort: intstr.FromInt32(p + 10000)})
	}
	return s
}

// grantsPolicy returns the plane's grant policy, or nil when there is none.
func grantsPolicy(ctx context.Context, p *cpv1.ComputePlane) (*ciliumv2.CiliumNetworkPolicy, error) {
	cnp := &ciliumv2.CiliumNetworkPolicy{}
	err := k8s.Get(ctx, client.ObjectKey{Namespace: infraOf(p), Name: netpol.GrantsName(p.Name, string(p.UID))}, cnp)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return cnp, err
}

// grantedServices lists, by their selectors' app label, the Services the policy opens.
func grantedServices(cnp *ciliumv2.CiliumNetworkPolicy) []string {
	if cnp == nil {
		return nil
	}
	var out []string
	for _, r := range cnp.Spec.Egress {
		for _, e := range r.ToEndpoints {
			out = append(out, e.MatchLabels["k8s:app"])
		}
	}
	return out
}

// TestServiceGrants: a grant needs both sides (the plane asks, the Service opts in),
// never opens a Service without a selector or one of another namespace, and goes when
// the Service opts out or goes; the policy is always exactly the grants, accepted by the
// real Cilium schema, and pending or refused grants do not hold the gate.
func TestServiceGrants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ask := func(name string, port int32) planeOpt { return withService(name, port) }
	p, _ := readyPlane(t, ctx, newClass("grants-"+rand.String(6)), ask("postgres", 5432), ask("cache", 6379), ask("legacy", 443), ask("missing", 80))
	key := client.ObjectKeyFromObject(p)
	other := tenantNamespace(t, ctx)
	for _, svc := range []*corev1.Service{
		service(p.Namespace, "postgres", "plane", map[string]string{"app": "postgres"}, 5432),
		service(p.Namespace, "cache", "", map[string]string{"app": "cache"}, 6379),  // not opted in (yet)
		service(p.Namespace, "legacy", "plane", nil, 443),                           // no selector
		service(other, "missing", "plane", map[string]string{"app": "missing"}, 80), // another namespace's
	} {
		if err := k8s.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]cpv1.GrantState{"postgres": cpv1.GrantGranted, "cache": cpv1.GrantPending, "legacy": cpv1.GrantRefused, "missing": cpv1.GrantPending}
	eventually(t, settle, grantStates(ctx, key, want))
	eventually(t, settle, grantsAre(ctx, p, "postgres"))
	cnp, err := grantsPolicy(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	rule := cnp.Spec.Egress[0]
	if sel := rule.ToEndpoints[0].MatchLabels; sel["k8s:io.kubernetes.pod.namespace"] != p.Namespace {
		t.Errorf("the grant selects outside the plane's namespace: %v", sel)
	}
	if ports := rule.ToPorts[0].Ports; len(ports) != 1 || ports[0].Port != "15432" || ports[0].Protocol != api.ProtoTCP {
		t.Errorf("the grant opens %+v, want the backend port 15432/TCP only", ports)
	}
	if len(cnp.Spec.EgressDeny) == 0 || cnp.Spec.EgressDeny[0].ToEntities[0] != api.EntityKubeAPIServer {
		t.Errorf("the grant policy does not deny the kube-apiserver: %+v", cnp.Spec.EgressDeny)
	}
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))

	// The cache's owner opts in: granted at once.
	optIn(t, ctx, p.Namespace, "cache", "plane")
	eventually(t, settle, grantsAre(ctx, p, "cache", "postgres"))
	// The postgres owner opts out: revoked.
	optIn(t, ctx, p.Namespace, "postgres", "")
	eventually(t, settle, grantsAre(ctx, p, "cache"))
	// The cache Service goes: nothing granted, no policy.
	if err := k8s.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "cache"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, grantsAre(ctx, p))
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))

	// The tenant cannot write policies or VMs where the plane's VMs run, nor label
	// them: the labels the policies select are the operator's alone.
	tenantUser(t, ctx, p.Namespace, "carol")
	for _, res := range []authorizationv1.ResourceAttributes{
		{Verb: "create", Group: "cilium.io", Resource: "ciliumnetworkpolicies", Namespace: infraOf(p)},
		{Verb: "patch", Group: "kubevirt.io", Resource: "virtualmachines", Namespace: infraOf(p)},
		{Verb: "patch", Group: "", Resource: "pods", Namespace: infraOf(p)},
		{Verb: "patch", Group: "infrastructure.cluster.x-k8s.io", Resource: "kubevirtmachinetemplates", Namespace: infraOf(p)},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "carol", ResourceAttributes: &res}}
		if err := k8s.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed {
			t.Errorf("a tenant may %s %s in the infrastructure namespace", res.Verb, res.Resource)
		}
	}
}

// TestGrantPolicyDriftIsRestored: a grant policy widened by hand (annotations kept) is
// reported and put back to exactly the grants.
func TestGrantPolicyDriftIsRestored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("grant-drift-"+rand.String(6)), withService("postgres", 5432))
	if err := k8s.Create(ctx, service(p.Namespace, "postgres", "plane", map[string]string{"app": "postgres"}, 5432)); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, grantsAre(ctx, p, "postgres"))
	eventually(t, settle, conditionIs(ctx, client.ObjectKeyFromObject(p), cpv1.NetworkPoliciesCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	cnp, err := grantsPolicy(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	cnp.Spec.Egress = append(cnp.Spec.Egress, api.EgressRule{EgressCommonRule: api.EgressCommonRule{ToEntities: api.EntitySlice{api.EntityCluster}}})
	if err := k8s.Update(ctx, cnp); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		cnp, err := grantsPolicy(ctx, p)
		if err != nil {
			return err
		}
		if len(cnp.Spec.Egress) != 1 {
			return errors.New("the widened grant policy is not restored")
		}
		return nil
	})
	eventually(t, settle, driftReported(ctx, p, "CiliumNetworkPolicy "+infraOf(p)+"/"+cnp.Name))
}

func optIn(t *testing.T, ctx context.Context, ns, name, plane string) {
	t.Helper()
	svc := &corev1.Service{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(svc.DeepCopy())
	if plane == "" {
		delete(svc.Labels, cpv1.ServiceAccessLabel)
	} else {
		metav1.SetMetaDataLabel(&svc.ObjectMeta, cpv1.ServiceAccessLabel, plane)
	}
	if err := k8s.Patch(ctx, svc, patch); err != nil {
		t.Fatal(err)
	}
}

func grantsAre(ctx context.Context, p *cpv1.ComputePlane, apps ...string) func() error {
	return func() error {
		cnp, err := grantsPolicy(ctx, p)
		if err != nil {
			return err
		}
		got := grantedServices(cnp)
		if fmt.Sprint(got) != fmt.Sprint(apps) && !(len(got) == 0 && len(apps) == 0) {
			return fmt.Errorf("the grant policy opens %v, want %v", got, apps)
		}
		return nil
	}
}

func grantStates(ctx context.Context, key client.ObjectKey, want map[string]cpv1.GrantState) func() error {
	return func() error {
		p := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, p); err != nil {
			return err
		}
		got := map[string]cpv1.GrantState{}
		for _, st := range p.Status.ServiceAccess {
			got[st.Name] = st.State
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("status.serviceAccess = %+v, want %v", p.Status.ServiceAccess, want)
		}
		if c := apimeta.FindStatusCondition(p.Status.Conditions, cpv1.NetworkPoliciesCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("NetworkPoliciesReady = %+v", c)
		}
		return nil
	}
}

// TestServiceCacheHoldsOnlyOptedIn: the operator caches the Services that opted in to a
// grant and no other, so a management cluster's thousands of Services cost it nothing;
// opting out drops the Service from the cache (a delete event: the plane revokes).
func TestServiceCacheHoldsOnlyOptedIn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenantNamespace(t, ctx)
	for _, s := range []*corev1.Service{service(ns, "plain", "", map[string]string{"app": "plain"}, 80),
		service(ns, "granted", "plane", map[string]string{"app": "granted"}, 80)} {
		if err := k8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	cached := func(want ...string) func() error {
		return func() error {
			var l corev1.ServiceList
			if err := reconciler.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
				return err
			}
			var got []string
			for _, s := range l.Items {
				got = append(got, s.Name)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("the operator's cache holds Services %v, want %v", got, want)
			}
			return nil
		}
	}
	eventually(t, settle, cached("granted"))
	svc := &corev1.Service{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "granted"}, svc); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(svc.DeepCopy())
	delete(svc.Labels, cpv1.ServiceAccessLabel)
	if err := k8s.Patch(ctx, svc, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, cached())
}
