package bench

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/netpol"
	"github.com/cozystack/computeplane/test/testkit"
)

// BenchmarkGrantsGeneration times the pure generation of a plane's grant policy.
func BenchmarkGrantsGeneration(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		g := netpol.Grants{Name: "p", Namespace: "cp-x", VMSelector: map[string]string{"computeplane.cozystack.io/uid": "u"}}
		for i := range n {
			g.Grants = append(g.Grants, netpol.Grant{Service: "svc-" + strconv.Itoa(i), Namespace: "tenant",
				Selector: map[string]string{"app": "svc-" + strconv.Itoa(i)}, Ports: []netpol.Port{{Port: "5432", Protocol: "TCP"}}})
		}
		b.Run(fmt.Sprintf("grants=%d", n), func(b *testing.B) {
			for b.Loop() {
				if netpol.GrantsPolicy(g) == nil {
					b.Fatal("no policy")
				}
			}
		})
	}
}

// BenchmarkGrantsApply: a Ready plane (real tenant apiserver) asks for N Services; their
// owners then opt in. It reports the time from the last opt-in to the plane reporting
// all N granted with the policy applied and read back, and the revocation latency: one
// Service opts out → the policy no longer opens it.
func BenchmarkGrantsApply(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("grants=%d", n), func(b *testing.B) {
			m := testkit.NewMeans(b)
			defer m.Report()
			for b.Loop() {
				benchmarkGrantsApply(b, m, n)
			}
		})
	}
}

func benchmarkGrantsApply(b *testing.B, m *testkit.Means, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op := newOperator(b, ctx, nil)
	op.startProvider(b, ctx)
	op.start(b, ctx)
	c := op.mgmt.Client
	class := op.createClass(b, ctx, "bench-grants")
	ns := "grants"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	p := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plane"}, Spec: cpv1.ComputePlaneSpec{ClassName: class.Name}}
	for i := range n {
		p.Spec.ServiceAccess = append(p.Spec.ServiceAccess, cpv1.ServiceAccess{Name: "svc-" + strconv.Itoa(i),
			Ports: []cpv1.ServicePort{{Port: 5432, Protocol: "TCP"}}})
	}
	if err := c.Create(ctx, p); err != nil {
		b.Fatal(err)
	}
	key := client.ObjectKeyFromObject(p)
	until(b, func() bool { return isTrue(ctx, c, key, cpv1.ReadyCondition) })
	for i := range n {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc-" + strconv.Itoa(i),
			Labels: map[string]string{cpv1.ServiceAccessLabel: "plane"}},
			// Headless: the test apiserver's Service range holds 256 addresses.
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "svc-" + strconv.Itoa(i)},
				Ports: []corev1.ServicePort{{Port: 5432, TargetPort: intstr.FromInt32(5432)}}}}
		if err := c.Create(ctx, svc); err != nil {
			b.Fatal(err)
		}
	}
	optedIn := time.Now()
	policyKey := client.ObjectKey{Namespace: render.InfrastructureNamespace(p, class), Name: netpol.GrantsName(p.Name, string(p.UID))}
	rules := func() int {
		cnp := &ciliumv2.CiliumNetworkPolicy{}
		if c.Get(ctx, policyKey, cnp) != nil {
			return 0
		}
		return len(cnp.Spec.Egress)
	}
	until(b, func() bool {
		got := &cpv1.ComputePlane{}
		if c.Get(ctx, key, got) != nil || len(got.Status.ServiceAccess) != n {
			return false
		}
		for _, st := range got.Status.ServiceAccess {
			if st.State != cpv1.GrantGranted {
				return false
			}
		}
		return isTrue(ctx, c, key, cpv1.NetworkPoliciesCondition) && rules() == n
	})
	m.Add("ms-opt-ins-to-all-granted", float64(time.Since(optedIn).Milliseconds()))

	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "svc-0"}, svc); err != nil {
		b.Fatal(err)
	}
	patch := client.MergeFrom(svc.DeepCopy())
	delete(svc.Labels, cpv1.ServiceAccessLabel)
	start := time.Now()
	if err := c.Patch(ctx, svc, patch); err != nil {
		b.Fatal(err)
	}
	until(b, func() bool { return rules() == n-1 })
	m.Add("ms-opt-out-to-revoked", float64(time.Since(start).Milliseconds()))
}
