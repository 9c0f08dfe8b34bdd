package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/computeplane"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/remote"
)

const settle = 20 * time.Second

// TestPlaneWaitsForClassThenProvisions: ClassNotFound (waiting, Reconciling) → the class
// appears → Valid, then Provisioned waits for Cluster API; later stages Blocked,
// observedGeneration current.
func TestPlaneWaitsForClassThenProvisions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenantNamespace(t, ctx)
	className := "std-" + rand.String(6)
	p := newPlane(ns, "plane", className, withGroup("workers", medium))
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(p)

	eventually(t, settle, conditionIs(ctx, key, cpv1.ValidCondition, metav1.ConditionFalse, cpv1.ClassNotFoundReason))
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReconcilingCondition, metav1.ConditionTrue, cpv1.ProgressingReason))
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionFalse, cpv1.ClassNotFoundReason))

	if err := k8s.Create(ctx, newClass(className)); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, conditionIs(ctx, key, cpv1.ValidCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	eventually(t, settle, conditionIs(ctx, key, cpv1.ProvisionedCondition, metav1.ConditionFalse, cpv1.WaitingForInfrastructureReason))
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReconcilingCondition, metav1.ConditionTrue, cpv1.ProgressingReason))
	eventually(t, settle, conditionIs(ctx, key, cpv1.PodSecurityCondition, metav1.ConditionUnknown, cpv1.BlockedReason))

	got := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if apimeta.FindStatusCondition(got.Status.Conditions, cpv1.StalledCondition) != nil {
		t.Errorf("Stalled while waiting for providers: %+v", got.Status.Conditions)
	}
	if got.Status.ObservedGeneration != got.Generation {
		t.Errorf("observedGeneration = %d, want %d", got.Status.ObservedGeneration, got.Generation)
	}
	for _, c := range cpv1.GatingConditions {
		if apimeta.FindStatusCondition(got.Status.Conditions, c) == nil {
			t.Errorf("no %s condition: one condition per stage is expected", c)
		}
	}
}

// TestPlaneExceedingClassIsStalled: a knob outside the class is terminal, names the
// field, and clears once the class allows it.
func TestPlaneExceedingClassIsStalled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenantNamespace(t, ctx)
	class := newClass("tight-" + rand.String(6))
	if err := k8s.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	p := newPlane(ns, "plane", class.Name, withGroup("gpu", cpv1.NodeGroup{
		MaxReplicas: 9, InstanceType: "u1.medium", GPUs: []cpv1.NodeGPU{{DeviceName: "nvidia.com/H100", Count: 1}},
	}))
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.StalledCondition, metav1.ConditionTrue, cpv1.SpecExceedsClassReason))
	got := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	msg := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ValidCondition).Message
	for _, want := range []string{"spec.nodeGroups[gpu].maxReplicas", "spec.nodeGroups[gpu].gpus[0].deviceName", "nvidia.com/H100"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Valid message %q does not name %q", msg, want)
		}
	}

	// The operator widens the class: the plane resumes without touching it.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), class); err != nil {
		t.Fatal(err)
	}
	class.Spec.NodeGroups.MaxReplicas = 10
	class.Spec.NodeGroups.GPUs = []cpv1.GPULimit{{DeviceName: "nvidia.com/H100", MaxPerNode: 1}}
	if err := k8s.Update(ctx, class); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, conditionIs(ctx, key, cpv1.ValidCondition, metav1.ConditionTrue, cpv1.SucceededReason))
}

// TestReconcileRequestAnnotation: the Flux convention forces a reconcile and is echoed.
func TestReconcileRequestAnnotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := createPlane(t, ctx, "absent-"+rand.String(6))
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.ValidCondition, metav1.ConditionFalse, cpv1.ClassNotFoundReason))

	for _, stamp := range []string{"1764672000", "1764672001"} {
		requestReconcile(t, ctx, p, stamp)
		eventually(t, settle, func() error {
			got := &cpv1.ComputePlane{}
			if err := k8s.Get(ctx, key, got); err != nil {
				return err
			}
			if got.Status.LastHandledReconcileAt != stamp {
				return fmt.Errorf("lastHandledReconcileAt = %q, want %q", got.Status.LastHandledReconcileAt, stamp)
			}
			return nil
		})
	}
}

// TestFinalizerAddedAndReleased: the finalizer appears, and deletion completes.
func TestFinalizerAddedAndReleased(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := createPlane(t, ctx, "absent-"+rand.String(6))
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(got, cpv1.ComputePlaneFinalizer) {
			return errors.New("no finalizer yet")
		}
		return nil
	})
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		err := k8s.Get(ctx, key, &cpv1.ComputePlane{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still present (err=%v)", err)
	})
}

// TestSteadyReconcileMakesNoWrites runs the reconciler by hand, through a client that
// counts writes, on a plane the manager has already settled: nothing may be written and
// no event emitted.
func TestSteadyReconcileMakesNoWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("quiet-"+rand.String(6)), withGroup("workers", medium))
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.ProvisionedCondition, metav1.ConditionFalse, cpv1.WaitingForInfrastructureReason))

	// Read through the running manager's caches, the plane's objects may lag behind the
	// writes that settled it: the manager is settled once three passes in a row, as the
	// manager reads, write nothing and emit nothing.
	var r *computeplane.Reconciler
	var writes *atomic.Int32
	eventually(t, settle, func() error {
		var counting client.Client
		counting, writes = countingClient(t, reconciler.Client)
		recorder := events.NewFakeRecorder(10)
		r = &computeplane.Reconciler{Client: counting, APIReader: k8s, Addons: reconciler.Addons, Events: recorder, RequeueInterval: time.Second,
			Planes: &remote.ClusterCache{Scheme: k8s.Scheme(), Timeout: time.Second, ProbeInterval: time.Second, Grace: time.Second}}
		for i := range 3 {
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
				return fmt.Errorf("reconcile %d: %w", i, err)
			}
		}
		if n := writes.Load(); n != 0 {
			return fmt.Errorf("a steady reconcile made %d writes, want 0", n)
		}
		if n := len(recorder.Events); n != 0 {
			return fmt.Errorf("a steady reconcile emitted %d events, want 0", n)
		}
		return nil
	})

	// Control: the same counting does count a reconcile that has something to change: a
	// reconcile request not yet handled. The running manager races this reconciler for
	// the request, so the plane is read as it was before either handled it.
	r.Client, writes = countingClient(t, unhandledRequests{k8s})
	requestReconcile(t, ctx, p, "now")
	_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	if writes.Load() == 0 {
		t.Error("the counting client saw no write for a reconcile request; the no-write check above proves nothing")
	}
}

// unhandledRequests reads ComputePlanes as they are before their reconcile request is
// handled.
type unhandledRequests struct{ client.Reader }

func (r unhandledRequests) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	err := r.Reader.Get(ctx, key, o, opts...)
	if p, ok := o.(*cpv1.ComputePlane); ok {
		p.Status.LastHandledReconcileAt = ""
	}
	return err
}

// countingClient is a client of the management apiserver that counts every write
// (create, update, patch, apply, delete, and the same on subresources). It reads through
// reads (nil: directly); given the running manager's client, it reads as the reconciler
// does in production, so a read the manager's scoped caches cannot answer (an object
// that then looks missing and is written again) shows up as a write.
func countingClient(t *testing.T, reads client.Reader) (client.Client, *atomic.Int32) {
	t.Helper()
	writes := &atomic.Int32{}
	count := func(string) { writes.Add(1) }
	base, err := client.NewWithWatch(mgmt.Config, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if reads == nil {
		reads = base
	}
	counting := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, _ client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			return reads.Get(ctx, key, o, opts...)
		},
		List: func(ctx context.Context, _ client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
			return reads.List(ctx, l, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			count("create")
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			count("update")
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			count("patch")
			return c.Patch(ctx, o, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			count("apply")
			return c.Apply(ctx, o, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			count("delete")
			return c.Delete(ctx, o, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			count("status update")
			return c.SubResource(sub).Update(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			count("status patch")
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, o runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			count("status apply")
			return c.SubResource(sub).Apply(ctx, o, opts...)
		},
	})
	return counting, writes
}
