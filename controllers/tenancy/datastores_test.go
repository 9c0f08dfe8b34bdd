package tenancy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func TestDataStoreFor(t *testing.T) {
	class := &cpv1.ComputePlaneClass{Spec: cpv1.ComputePlaneClassSpec{ControlPlane: cpv1.ControlPlaneProfile{
		DataStoreName: "shared",
		DataStores: []cpv1.DataStoreAssignment{
			{Name: "acme-own", NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "tenant-acme"}}},
			{Name: "premium", NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "premium"}}},
		},
	}}}
	plane := func(recorded, infra string) *cpv1.ComputePlane {
		p := &cpv1.ComputePlane{}
		p.Status.DataStoreName, p.Status.InfrastructureNamespace = recorded, infra
		return p
	}
	cases := []struct {
		name     string
		p        *cpv1.ComputePlane
		nsLabels map[string]string
		want     string
	}{
		{"selected by name: its own", plane("", ""), map[string]string{"kubernetes.io/metadata.name": "tenant-acme", "tier": "premium"}, "acme-own"},
		{"selected by a label", plane("", ""), map[string]string{"kubernetes.io/metadata.name": "tenant-b", "tier": "premium"}, "premium"},
		{"selected by none: the class's", plane("", ""), map[string]string{"kubernetes.io/metadata.name": "tenant-c"}, "shared"},
		{"recorded: kept, whatever the labels say now", plane("premium", "cp-x"), map[string]string{"kubernetes.io/metadata.name": "tenant-acme"}, "premium"},
		{"provisioned before the choice was recorded: where it was rendered", plane("", "cp-x"), map[string]string{"tier": "premium"}, "shared"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := DataStoreFor(tc.p, class, tc.nsLabels); got != tc.want {
				t.Errorf("DataStoreFor = %q, want %q", got, tc.want)
			}
		})
	}
}
