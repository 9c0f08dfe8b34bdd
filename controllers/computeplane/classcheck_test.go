package computeplane

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

func TestCheckAgainstClass(t *testing.T) {
	class := cpv1.ComputePlaneClassSpec{NodeGroups: cpv1.NodeGroupLimits{
		MaxGroups: 2, MaxReplicas: 5, MaxCPU: q("8"), MaxMemory: q("32Gi"), MaxDiskSize: q("100Gi"),
		InstanceTypes: []string{"u1.medium", "u1.large"},
		GPUs:          []cpv1.GPULimit{{DeviceName: "nvidia.com/A10", MaxPerNode: 2}},
	}}
	res := func(cpu, mem string) *cpv1.NodeResources {
		return &cpv1.NodeResources{CPU: resource.MustParse(cpu), Memory: resource.MustParse(mem)}
	}
	cases := []struct {
		name   string
		groups map[string]cpv1.NodeGroup
		want   []string // substrings, one per expected error; empty means valid
	}{
		{"no groups", nil, nil},
		{"within limits", map[string]cpv1.NodeGroup{
			"a": {MaxReplicas: 5, InstanceType: "u1.large"},
			"b": {MaxReplicas: 1, Resources: res("8", "32Gi"), DiskSize: q("100Gi"),
				GPUs: []cpv1.NodeGPU{{DeviceName: "nvidia.com/A10", Count: 2}}},
		}, nil},
		{"too many groups", map[string]cpv1.NodeGroup{
			"a": {MaxReplicas: 1, InstanceType: "u1.medium"},
			"b": {MaxReplicas: 1, InstanceType: "u1.medium"},
			"c": {MaxReplicas: 1, InstanceType: "u1.medium"},
		}, []string{"spec.nodeGroups: Too many: 3: must have at most 2 items"}},
		{"replicas above ceiling", map[string]cpv1.NodeGroup{"a": {MaxReplicas: 6, InstanceType: "u1.medium"}},
			[]string{"spec.nodeGroups[a].maxReplicas: Invalid value: 6: exceeds the class's nodeGroups.maxReplicas (5)"}},
		{"instance type not allowed", map[string]cpv1.NodeGroup{"a": {MaxReplicas: 1, InstanceType: "m1.huge"}},
			[]string{`spec.nodeGroups[a].instanceType: Unsupported value: "m1.huge"`}},
		{"resources above ceiling", map[string]cpv1.NodeGroup{"a": {MaxReplicas: 1, Resources: res("16", "64Gi"), DiskSize: q("1Ti")}},
			[]string{"resources.cpu", "resources.memory", "diskSize"}},
		{"GPU not allowed", map[string]cpv1.NodeGroup{"a": {MaxReplicas: 1, InstanceType: "u1.medium",
			GPUs: []cpv1.NodeGPU{{DeviceName: "nvidia.com/H100", Count: 1}}}},
			[]string{"spec.nodeGroups[a].gpus[0].deviceName: Forbidden: GPU nvidia.com/H100 is not allowed"}},
		{"too many GPUs per node", map[string]cpv1.NodeGroup{"a": {MaxReplicas: 1, InstanceType: "u1.medium",
			GPUs: []cpv1.NodeGPU{{DeviceName: "nvidia.com/A10", Count: 3}}}},
			[]string{"spec.nodeGroups[a].gpus[0].count: Invalid value: 3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := checkAgainstClass("tenant-a", &cpv1.ComputePlaneSpec{ClassName: "c", NodeGroups: tc.groups}, &class)
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors %v, want %d", len(errs), errs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i].Error(), w)
				}
			}
		})
	}
}

func TestPlacementNamespacesAvoidPrivilegedOnes(t *testing.T) {
	class := cpv1.ComputePlaneClassSpec{
		PodSecurity: cpv1.PodSecurityProfile{ExemptNamespaces: []string{"kube-system", "cilium-system"}},
		Addons:      []cpv1.SystemAddon{{Name: "certs", TargetNamespace: "cert-manager"}},
	}
	cases := []struct {
		name       string
		namespace  string
		placements []string
		want       []string
	}{
		{"ordinary", "tenant-a", []string{"notebooks"}, nil},
		{"exempt namespace", "tenant-a", []string{"cilium-system"}, []string{"spec.placementNamespaces[0]: Forbidden: cilium-system is exempt from Pod Security"}},
		{"add-on target", "tenant-a", []string{"notebooks", "cert-manager"}, []string{"spec.placementNamespaces[1]: Forbidden: cert-manager is add-on certs's target namespace"}},
		{"operator namespace", "tenant-a", []string{"computeplane-system"}, []string{"reserved for the operator"}},
		{"plane namespace named like a system one", "kube-public", nil, []string{"metadata.namespace: Forbidden: kube-public is also the plane's placement namespace"}},
		{"plane namespace named like an add-on target", "cert-manager", nil, []string{"metadata.namespace: Forbidden: cert-manager"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := checkAgainstClass(tc.namespace, &cpv1.ComputePlaneSpec{ClassName: "c", PlacementNamespaces: tc.placements}, &class)
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors %v, want %d", len(errs), errs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i].Error(), w)
				}
			}
		})
	}
}
