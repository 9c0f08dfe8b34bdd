package computeplane

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// patchValidFalse runs the deferred status patch of a reconcile that observed one stage
// result (Valid False).
func patchValidFalse(ctx context.Context, r *Reconciler, p *cpv1.ComputePlane) error {
	s := &scope{plane: p, results: map[string]stageResult{
		cpv1.ValidCondition: stageFalse(cpv1.ClassNotFoundReason, "class %q is missing", p.Spec.ClassName),
	}}
	return r.patchStatus(ctx, s, p.Status.DeepCopy(), nil)
}

// TestStatusPatchOfAGonePlane: a plane deleted while it was being reconciled is not an
// error (the patch used to wrap a nil NotFound into one), and nothing is announced.
func TestStatusPatchOfAGonePlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recorder := events.NewFakeRecorder(10)
	r := &Reconciler{Client: k8s, Events: recorder}
	gone := &cpv1.ComputePlane{}
	gone.Namespace, gone.Name, gone.Spec.ClassName = "tenant-"+rand.String(6), "gone", "c"
	if err := patchValidFalse(ctx, r, gone); err != nil {
		t.Errorf("patching the status of a deleted plane: %v", err)
	}
	if n := len(recorder.Events); n != 0 {
		t.Errorf("%d events for a status that was never written: %v", n, <-recorder.Events)
	}
}

// TestNoEventsWhenStatusPatchFails: a condition change is announced only once it is
// written; a failed patch is retried, and reported then.
func TestNoEventsWhenStatusPatchFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := tenantPlane(t, ctx, "missing-"+rand.String(6))
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = nil // as if nothing had been reported yet
	direct, err := client.NewWithWatch(mgmt.Config, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	failing := interceptor.NewClient(direct, interceptor.Funcs{
		SubResourceApply: func(context.Context, client.Client, string, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
			return errors.New("injected: the apiserver refused the status")
		},
	})
	recorder := events.NewFakeRecorder(10)
	r := &Reconciler{Client: failing, Events: recorder}
	if err := patchValidFalse(ctx, r, p); err == nil {
		t.Fatal("the injected failure was not returned")
	}
	if n := len(recorder.Events); n != 0 {
		t.Errorf("%d events for a status that was not written: %v", n, <-recorder.Events)
	}
	// Control: the same patch through a working client does announce the change.
	r.Client = k8s
	p.Status.Conditions = nil
	if err := patchValidFalse(ctx, r, p); err != nil {
		t.Fatal(err)
	}
	if len(recorder.Events) == 0 {
		t.Error("no event for a written transition; the check above proves nothing")
	}
}
