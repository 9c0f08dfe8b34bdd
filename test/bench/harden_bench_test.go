package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/tenancy"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/netpol"
	"github.com/cozystack/computeplane/test/testkit"
)

// BenchmarkHardening measures, with a real tenant apiserver per plane (the dev provider
// stands in for Kamaji): the time from the control plane reported Ready (its API
// reachable) to the ComputePlane's Ready, and the time from a drift (a policy deleted, a
// namespace relabelled, the egress baseline deleted: one per plane, in turn) to the object
// restored and the plane Ready again; every third plane, its etcd stopped and started.
// Run it 15 times or more (-benchtime 15x) for five of each drift; the medians and 90th
// percentiles are printed at the end.
func BenchmarkHardening(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op := newOperator(b, ctx, nil)
	mgmt := op.mgmt
	provider := op.startProvider(b, ctx)
	op.start(b, ctx)

	c := mgmt.Client
	class := op.createClass(b, ctx, "bench-harden")
	m := testkit.NewMeans(b)
	defer m.Report()
	round := 0
	for b.Loop() {
		round++
		ns := fmt.Sprintf("harden-%d", round)
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
		p := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plane"},
			Spec: cpv1.ComputePlaneSpec{ClassName: class.Name, PlacementNamespaces: []string{"notebooks"}}}
		created := time.Now()
		if err := c.Create(ctx, p); err != nil {
			b.Fatal(err)
		}
		key := client.ObjectKeyFromObject(p)
		infra := render.InfrastructureNamespace(p, class)
		reachable := until(b, func() bool {
			tcp := &kamajiv1alpha1.TenantControlPlane{}
			if c.Get(ctx, client.ObjectKey{Namespace: infra, Name: "plane"}, tcp) != nil {
				return false
			}
			st := tcp.Status.Kubernetes.Version.Status
			return st != nil && *st == kamajiv1alpha1.VersionReady
		})
		ready := until(b, func() bool { return isTrue(ctx, c, key, cpv1.ReadyCondition) })
		m.Add("ms-reachable-to-Ready", float64(ready.Sub(reachable).Milliseconds()))
		m.Add("ms-create-to-Ready", float64(ready.Sub(created).Milliseconds()))

		// Drift made with the operator's own credential: anyone else is refused by the
		// plane's admission policies before anything drifts. One kind per plane, in turn,
		// so each is its plane's first drift (the repairs of a series back off by design:
		// controllers/drift.go).
		tenant := operatorClient(b, ctx, c, infra)
		switch round % 3 {
		case 1:
			vap := &admissionv1.ValidatingAdmissionPolicy{}
			if err := tenant.Get(ctx, client.ObjectKey{Name: "computeplane-pod-hardening"}, vap); err != nil {
				b.Fatal(err)
			}
			uid := vap.UID
			start := time.Now()
			if err := tenant.Delete(ctx, vap); err != nil {
				b.Fatal(err)
			}
			restored := until(b, func() bool {
				return tenant.Get(ctx, client.ObjectKeyFromObject(vap), vap) == nil && vap.UID != uid
			})
			m.Add("ms-policy-deleted-to-restored", float64(restored.Sub(start).Milliseconds()))
			ready = until(b, func() bool { return isTrue(ctx, c, key, cpv1.ReadyCondition) })
			m.Add("ms-policy-deleted-to-Ready", float64(ready.Sub(start).Milliseconds()))
		case 2:
			nsObj := &corev1.Namespace{}
			if err := tenant.Get(ctx, client.ObjectKey{Name: "notebooks"}, nsObj); err != nil {
				b.Fatal(err)
			}
			patch := client.MergeFrom(nsObj.DeepCopy())
			nsObj.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
			start := time.Now()
			if err := tenant.Patch(ctx, nsObj, patch); err != nil {
				b.Fatal(err)
			}
			restored := until(b, func() bool {
				return tenant.Get(ctx, client.ObjectKeyFromObject(nsObj), nsObj) == nil &&
					nsObj.Labels["pod-security.kubernetes.io/enforce"] == "restricted"
			})
			m.Add("ms-relabel-to-restored", float64(restored.Sub(start).Milliseconds()))
			ready = until(b, func() bool { return isTrue(ctx, c, key, cpv1.ReadyCondition) })
			m.Add("ms-relabel-to-Ready", float64(ready.Sub(start).Milliseconds()))
		case 0:
			cnp := &ciliumv2.CiliumNetworkPolicy{}
			cnpKey := client.ObjectKey{Namespace: infra, Name: netpol.BaselineName(p.Name, string(p.UID))}
			if err := c.Get(ctx, cnpKey, cnp); err != nil {
				b.Fatal(err)
			}
			uid := cnp.UID
			start := time.Now()
			if err := c.Delete(ctx, cnp); err != nil {
				b.Fatal(err)
			}
			restored := until(b, func() bool { return c.Get(ctx, cnpKey, cnp) == nil && cnp.UID != uid })
			m.Add("ms-baseline-deleted-to-restored", float64(restored.Sub(start).Milliseconds()))
			ready = until(b, func() bool { return isTrue(ctx, c, key, cpv1.ReadyCondition) })
			m.Add("ms-baseline-deleted-to-Ready", float64(ready.Sub(start).Milliseconds()))
		}
		if round%3 != 0 {
			continue
		}

		// The plane's etcd dies while its apiserver stays up: the gate must close (and
		// the applier credential go), then reopen once etcd is back.
		plane := provider.Tenant(types.NamespacedName{Namespace: infra, Name: "plane"})
		secretKey := client.ObjectKey{Namespace: ns, Name: tenancy.ApplierSecretName(p)}
		start := time.Now()
		if err := plane.StopEtcd(); err != nil {
			b.Fatal(err)
		}
		closed := until(b, func() bool {
			return !isTrue(ctx, c, key, cpv1.ReadyCondition) && apierrors.IsNotFound(c.Get(ctx, secretKey, &corev1.Secret{}))
		})
		m.Add("ms-etcd-stopped-to-gate-closed", float64(closed.Sub(start).Milliseconds()))
		start = time.Now()
		if err := plane.StartEtcd(); err != nil {
			b.Fatal(err)
		}
		ready = until(b, func() bool { return isTrue(ctx, c, key, cpv1.ReadyCondition) })
		m.Add("ms-etcd-started-to-Ready", float64(ready.Sub(start).Milliseconds()))
	}
}

func operatorClient(b *testing.B, ctx context.Context, c client.Client, ns string) client.Client {
	b.Helper()
	tc, err := devenv.PlaneAdminClient(ctx, c, ns, "plane")
	if err != nil {
		b.Fatal(err)
	}
	return tc
}

// until polls cond every 5 ms (the figures are in milliseconds) and returns when it held.
func until(b *testing.B, cond func() bool) time.Time {
	b.Helper()
	testkit.Poll(b, time.Minute, 5*time.Millisecond, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	})
	return time.Now()
}

func isTrue(ctx context.Context, c client.Client, key client.ObjectKey, t string) bool {
	p := &cpv1.ComputePlane{}
	return c.Get(ctx, key, p) == nil && apimeta.IsStatusConditionTrue(p.Status.Conditions, t)
}
