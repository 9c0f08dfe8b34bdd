package render

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// TestMachineHealthCheck: one health check per node group, selecting exactly that
// group's Machines (as its MachineDeployment labels them) and no other group's, with the
// class's thresholds or the defaults.
func TestMachineHealthCheck(t *testing.T) {
	ready := func(status corev1.ConditionStatus, secs int32) clusterv1.UnhealthyNodeCondition {
		return clusterv1.UnhealthyNodeCondition{Type: corev1.NodeReady, Status: status, TimeoutSeconds: ptr.To(secs)}
	}
	cases := []struct {
		name          string
		hc            cpv1.NodeHealthCheck
		wantStartup   int32
		wantCondition []clusterv1.UnhealthyNodeCondition
		wantMax       intstr.IntOrString
	}{
		{
			name:          "defaults",
			wantStartup:   1200,
			wantCondition: []clusterv1.UnhealthyNodeCondition{ready(corev1.ConditionFalse, 300), ready(corev1.ConditionUnknown, 300)},
			wantMax:       intstr.FromString("40%"),
		},
		{
			name: "class thresholds",
			hc: cpv1.NodeHealthCheck{
				NodeStartupTimeoutSeconds:  ptr.To(int32(600)),
				UnhealthyNodeConditions:    []cpv1.UnhealthyNodeCondition{{Type: "Ready", Status: "Unknown", TimeoutSeconds: 60}, {Type: "DiskPressure", Status: "True", TimeoutSeconds: 900}},
				UnhealthyLessThanOrEqualTo: ptr.To(intstr.FromInt32(1)),
			},
			wantStartup: 600,
			wantCondition: []clusterv1.UnhealthyNodeCondition{ready(corev1.ConditionUnknown, 60),
				{Type: "DiskPressure", Status: corev1.ConditionTrue, TimeoutSeconds: ptr.To(int32(900))}},
			wantMax: intstr.FromInt32(1),
		},
		{
			name:          "startup check off",
			hc:            cpv1.NodeHealthCheck{NodeStartupTimeoutSeconds: ptr.To(int32(0))},
			wantStartup:   0,
			wantCondition: []clusterv1.UnhealthyNodeCondition{ready(corev1.ConditionFalse, 300), ready(corev1.ConditionUnknown, 300)},
			wantMax:       intstr.FromString("40%"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			class := testClass()
			class.Spec.NodeGroups.HealthCheck = tc.hc
			plane := testPlane(map[string]cpv1.NodeGroup{
				"workers": {MinReplicas: 1, MaxReplicas: 3, InstanceType: "u1.medium"},
				"gpu":     {MinReplicas: 0, MaxReplicas: 0, InstanceType: "u1.medium"},
			})
			groups, err := NodeGroups(plane, class, "v1.33.4")
			if err != nil {
				t.Fatal(err)
			}
			for i, g := range groups {
				mhc := g.HealthCheck
				if mhc.Namespace != "cp-tenant-a-3f2a9c1b" || mhc.Name != g.MachineDeployment.Name || mhc.Spec.ClusterName != "plane" {
					t.Errorf("%s: MachineHealthCheck %s/%s of cluster %q", g.Name, mhc.Namespace, mhc.Name, mhc.Spec.ClusterName)
				}
				if mhc.Labels[cpv1.PlaneUIDLabel] != string(plane.UID) || mhc.Labels[cpv1.NodeGroupLabel] != g.Name {
					t.Errorf("%s: labels %v", g.Name, mhc.Labels)
				}
				sel, err := metav1.LabelSelectorAsSelector(&mhc.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				// Machines carry the MachineDeployment's template labels.
				if !sel.Matches(labels.Set(g.MachineDeployment.Spec.Template.Labels)) {
					t.Errorf("%s: selector %v misses its own Machines %v", g.Name, sel, g.MachineDeployment.Spec.Template.Labels)
				}
				other := groups[1-i].MachineDeployment.Spec.Template.Labels
				if sel.Matches(labels.Set(other)) {
					t.Errorf("%s: selector %v also matches group %s's Machines", g.Name, sel, groups[1-i].Name)
				}
				if got := ptr.Deref(mhc.Spec.Checks.NodeStartupTimeoutSeconds, -1); got != tc.wantStartup {
					t.Errorf("%s: nodeStartupTimeoutSeconds = %d, want %d", g.Name, got, tc.wantStartup)
				}
				if !reflect.DeepEqual(mhc.Spec.Checks.UnhealthyNodeConditions, tc.wantCondition) {
					t.Errorf("%s: unhealthyNodeConditions = %+v, want %+v", g.Name, mhc.Spec.Checks.UnhealthyNodeConditions, tc.wantCondition)
				}
				if got := mhc.Spec.Remediation.TriggerIf.UnhealthyLessThanOrEqualTo; got == nil || *got != tc.wantMax {
					t.Errorf("%s: unhealthyLessThanOrEqualTo = %v, want %v", g.Name, got, tc.wantMax)
				}
			}
		})
	}
}

// TestGraphHasAHealthCheckPerGroup: the plane's graph applies each group's health check
// after its MachineDeployment.
func TestGraphHasAHealthCheckPerGroup(t *testing.T) {
	g, err := Plane(testPlane(map[string]cpv1.NodeGroup{
		"a": {MinReplicas: 1, MaxReplicas: 1, InstanceType: "u1.medium"},
		"b": {MinReplicas: 2, MaxReplicas: 2, InstanceType: "u1.medium"},
	}), testClass(), "v1.33.4")
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, o := range g.Objects {
		pos[o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName()] = i
	}
	for _, name := range []string{"plane-a", "plane-b"} {
		md, okMD := pos["MachineDeployment/"+name]
		mhc, okMHC := pos["MachineHealthCheck/"+name]
		if !okMD || !okMHC || mhc < md {
			t.Errorf("%s: MachineDeployment at %d (%v), MachineHealthCheck at %d (%v)", name, md, okMD, mhc, okMHC)
		}
	}
}
