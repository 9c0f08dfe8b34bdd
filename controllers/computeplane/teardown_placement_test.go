package computeplane

import (
	"reflect"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func TestUninstallHolds(t *testing.T) {
	release := func(name string, finalizers []string, labels map[string]string, ready *metav1.Condition) helmv2.HelmRelease {
		hr := helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers, Labels: labels}}
		hr.Status.StorageNamespace = "tenant-a" // installed
		if ready != nil {
			hr.Status.Conditions = []metav1.Condition{*ready}
		}
		return hr
	}
	failing := &metav1.Condition{Type: meta.ReadyCondition, Status: metav1.ConditionFalse, Message: "uninstall failed: context deadline exceeded"}
	cases := []struct {
		name     string
		releases []helmv2.HelmRelease
		want     []string
	}{
		{"nothing left", nil, nil},
		{"held by the operator until Flux reports it uninstalled",
			[]helmv2.HelmRelease{release("a", []string{cpv1.PlacementFinalizer}, nil, nil)}, []string{"a"}},
		{"held by Flux",
			[]helmv2.HelmRelease{release("a", []string{helmv2.HelmReleaseFinalizer}, nil, nil)}, []string{"a"}},
		{"never installed (or uninstalled): nothing for Flux to uninstall, whatever holds it",
			[]helmv2.HelmRelease{func() helmv2.HelmRelease {
				hr := release("a", []string{helmv2.HelmReleaseFinalizer, cpv1.PlacementFinalizer}, map[string]string{cpv1.ShardKeyLabel: "nobody"}, nil)
				hr.Status.StorageNamespace = ""
				return hr
			}()}, nil},
		{"only someone else's finalizer: Flux is done with it, no credential waits",
			[]helmv2.HelmRelease{release("a", []string{"tenant.example.com/hold"}, nil, nil)}, nil},
		{"someone else's finalizer beside Flux's is named",
			[]helmv2.HelmRelease{release("a", []string{helmv2.HelmReleaseFinalizer, "tenant.example.com/hold"}, nil, nil)},
			[]string{"a (also held by finalizer(s) tenant.example.com/hold)"}},
		{"a shard label is named: only that shard uninstalls it",
			[]helmv2.HelmRelease{release("a", []string{cpv1.PlacementFinalizer}, map[string]string{cpv1.ShardKeyLabel: "s9"}, nil)},
			[]string{"a (labelled sharding.fluxcd.io/key=s9: only a Flux shard serving that key uninstalls it)"}},
		{"Flux's failure is quoted",
			[]helmv2.HelmRelease{release("a", []string{helmv2.HelmReleaseFinalizer}, nil, failing)},
			[]string{"a (Flux says: uninstall failed: context deadline exceeded)"}},
		{"sorted",
			[]helmv2.HelmRelease{release("b", []string{cpv1.PlacementFinalizer}, nil, nil), release("a", []string{cpv1.PlacementFinalizer}, nil, nil)},
			[]string{"a", "b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := uninstallHolds(tc.releases); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("uninstallHolds = %q, want %q", got, tc.want)
			}
		})
	}
}
