package tenancy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func TestShardHolds(t *testing.T) {
	plane := func(l map[string]string) *cpv1.ComputePlane {
		return &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Labels: l}}
	}
	main, _ := labels.Parse("!" + cpv1.ShardKeyLabel)
	shard1, _ := labels.Parse(cpv1.ShardKeyLabel + " in (shard1)")
	cases := []struct {
		name        string
		plane       *cpv1.ComputePlane
		main, one   bool
		unshardedOK bool
	}{
		{"unlabelled plane", plane(nil), true, false, true},
		{"plane of shard1", plane(map[string]string{cpv1.ShardKeyLabel: "shard1"}), false, true, true},
		{"plane of shard2", plane(map[string]string{cpv1.ShardKeyLabel: "shard2"}), false, false, true},
		{"namespace without a plane", nil, true, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Shard{Selector: main}).Holds(tc.plane); got != tc.main {
				t.Errorf("main shard holds = %v, want %v", got, tc.main)
			}
			if got := (Shard{Selector: shard1}).Holds(tc.plane); got != tc.one {
				t.Errorf("shard1 holds = %v, want %v", got, tc.one)
			}
			if got := (Shard{}).Holds(tc.plane); got != tc.unshardedOK {
				t.Errorf("no sharding holds = %v, want %v", got, tc.unshardedOK)
			}
		})
	}
}
