package tenancy

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func TestOldestPlane(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(1000, 0))
	t1 := metav1.NewTime(time.Unix(2000, 0))
	gone := metav1.NewTime(time.Unix(3000, 0))
	plane := func(name string, created metav1.Time, deleting bool) cpv1.ComputePlane {
		p := cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created}}
		if deleting {
			p.DeletionTimestamp = &gone
		}
		return p
	}
	cases := []struct {
		name   string
		planes []cpv1.ComputePlane
		want   string
	}{
		{"none", nil, ""},
		{"older wins", []cpv1.ComputePlane{plane("b", t1, false), plane("a", t0, false)}, "a"},
		{"name breaks a tie", []cpv1.ComputePlane{plane("b", t0, false), plane("a", t0, false)}, "a"},
		{"a plane being deleted hands over", []cpv1.ComputePlane{plane("a", t0, true), plane("b", t1, false)}, "b"},
		{"all deleting", []cpv1.ComputePlane{plane("a", t0, true)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := OldestPlane(tc.planes)
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tc.want {
				t.Errorf("oldest = %q, want %q", name, tc.want)
			}
		})
	}
}
