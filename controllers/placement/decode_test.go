package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func TestDecodeJudged(t *testing.T) {
	many := func(n int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"k%d":0`, i)
		}
		b.WriteString("}")
		return b.String()
	}
	for _, tc := range []struct {
		name, in string
		tooLarge bool
	}{
		{name: "ordinary", in: `{"metadata":{"name":"a","labels":{"x":"y"}},"spec":{"interval":"1m","values":{"a":1}}}`},
		{name: "large values are not judged", in: `{"metadata":{"name":"a"},"spec":{"values":` + many(200000) + `}}`},
		{name: "large managedFields and status are not judged", in: `{"metadata":{"name":"a","managedFields":[` + many(100000) + `]},"spec":{},"status":` + many(100000) + `}`},
		{name: "a large spec is refused", in: `{"metadata":{"name":"a"},"spec":{"postRenderers":[` + many(40000) + `]}}`, tooLarge: true},
		{name: "large annotations are refused", in: `{"metadata":{"name":"a","annotations":` + many(40000) + `},"spec":{}}`, tooLarge: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := decodeJudged([]byte(tc.in))
			var big errTooLarge
			if errors.As(err, &big) != tc.tooLarge {
				t.Fatalf("err = %v, want too large %v", err, tc.tooLarge)
			}
			if tc.tooLarge {
				if !strings.Contains(err.Error(), "spec.values") {
					t.Errorf("the refusal does not say what to do: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := obj["status"]; ok {
				t.Error("status decoded")
			}
			if _, ok := nested(obj, "metadata", "managedFields").([]any); ok {
				t.Error("managedFields decoded")
			}
			if v, ok := nested(obj, "spec", "values").(map[string]any); ok {
				t.Errorf("values decoded: %d keys", len(v))
			}
		})
	}

	// Values are compared, never read: a change of values is a change of spec.
	a, _ := decodeJudged([]byte(`{"spec":{"values":{"a":1}}}`))
	b, _ := decodeJudged([]byte(`{"spec":{"values":{"a":2}}}`))
	c, _ := decodeJudged([]byte(`{"spec":{"values":{"a":1}}}`))
	if nested(a, "spec", "values") == nested(b, "spec", "values") || nested(a, "spec", "values") != nested(c, "spec", "values") {
		t.Error("the values' digests do not tell different values apart")
	}
	if !isDeleted([]byte(`{"metadata":{"deletionTimestamp":"2026-01-01T00:00:00Z"}}`)) || isDeleted([]byte(`{"metadata":{}}`)) {
		t.Error("isDeleted")
	}
}

// TestAdmissionMemoryIsBoundedByWhatItJudges: the attack is a 3 MiB placement release
// whose values are ~300,000 tiny keys, sent (with --dry-run=server, as often and as
// concurrently as a tenant likes) through both webhooks. Decoded into a generic map,
// re-encoded and diffed into a JSON patch, one such request cost the webhook ~300 MiB, so
// a handful in flight took every replica past its limit, and with failurePolicy Fail no
// tenant's Flux object was admitted. Admission must allocate in proportion to what its
// rules read: here, a small multiple of the request.
func TestAdmissionMemoryIsBoundedByWhatItJudges(t *testing.T) {
	s := kruntime.NewScheme()
	utilruntime.Must(cpv1.AddToScheme(s))
	plane := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "plane"}, Spec: cpv1.ComputePlaneSpec{ClassName: "c"}}
	reader := fake.NewClientBuilder().WithScheme(s).WithObjects(plane).Build()
	w := &Webhook{Reader: reader, Cache: reader}

	var values strings.Builder
	values.WriteString("{")
	for i := 0; values.Len() < 3<<20; i++ {
		if i > 0 {
			values.WriteString(",")
		}
		fmt.Fprintf(&values, `"k%d":0`, i)
	}
	values.WriteString("}")
	raw := []byte(`{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{"name":"big","namespace":"tenant","labels":{"` +
		cpv1.PlacementLabel + `":"` + cpv1.PlacementLabelValue + `"}},"spec":{"interval":"1h","chartRef":{"kind":"OCIRepository","name":"app"},"values":` + values.String() + `}}`)
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "tenant", Name: "big",
		Kind: metav1.GroupVersionKind{Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmRelease"},
	}}
	req.Object.Raw = raw

	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	var mutated admission.Response
	got := allocated(func() {
		mutated = w.mutate(context.Background(), req)
		_ = w.validate(context.Background(), req)
	})
	if !mutated.Allowed || len(mutated.Patches) == 0 {
		t.Fatalf("the placement release was not routed: %+v", mutated.Result)
	}
	if _, err := json.Marshal(mutated.Patches); err != nil {
		t.Fatal(err)
	}
	t.Logf("admitting a %d KiB release allocated %.1f MiB", len(raw)>>10, float64(got)/(1<<20))
	if limit := uint64(4 * len(raw)); got > limit {
		t.Errorf("admitting a %d KiB release allocated %d MiB, more than %d MiB (4x the request)", len(raw)>>10, got>>20, limit>>20)
	}
}
