package capistandin

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPlanScaleUp(t *testing.T) {
	node := func(cpu string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu),
				corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110")}}}
	}
	pod := func(name, cpu string, mut ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}
		for _, m := range mut {
			m(p)
		}
		return p
	}
	workers := nodeGroup{ID: "MachineDeployment/infra/workers", Min: 1, Max: 3, Replicas: 1, Registered: 1, Template: node("2", map[string]string{"group": "workers"})}
	gpu := corev1.Taint{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name        string
		groups      []nodeGroup
		pending     []*corev1.Pod
		wantTargets map[string]int32
		wantPods    map[string]string // reason
		wantMessage map[string]string
	}{
		{name: "one pod, one new node", groups: []nodeGroup{workers}, pending: []*corev1.Pod{pod("a", "1500m")},
			wantTargets: map[string]int32{workers.ID: 2}, wantPods: map[string]string{"ns/a": reasonTriggered},
			wantMessage: map[string]string{"ns/a": "pod triggered scale-up: [{MachineDeployment/infra/workers 1->2 (max: 3)}]"}},
		{name: "two pods share a new node", groups: []nodeGroup{workers}, pending: []*corev1.Pod{pod("a", "900m"), pod("b", "900m")},
			wantTargets: map[string]int32{workers.ID: 2}, wantPods: map[string]string{"ns/a": reasonTriggered, "ns/b": reasonTriggered}},
		{name: "capped at max", groups: []nodeGroup{workers}, pending: []*corev1.Pod{pod("a", "1500m"), pod("b", "1500m"), pod("c", "1500m")},
			wantTargets: map[string]int32{workers.ID: 3}, wantPods: map[string]string{"ns/a": reasonTriggered, "ns/b": reasonTriggered, "ns/c": reasonNotTriggered},
			wantMessage: map[string]string{"ns/c": "pod didn't trigger scale-up: 1 max node group size reached"}},
		{name: "a node on its way takes the pod", groups: []nodeGroup{{ID: workers.ID, Max: 3, Replicas: 2, Registered: 1, Template: workers.Template}},
			pending: []*corev1.Pod{pod("a", "1500m")}, wantTargets: map[string]int32{}, wantPods: map[string]string{}},
		{name: "too big for any node", groups: []nodeGroup{workers}, pending: []*corev1.Pod{pod("a", "3")},
			wantTargets: map[string]int32{}, wantPods: map[string]string{"ns/a": reasonNotTriggered},
			wantMessage: map[string]string{"ns/a": "pod didn't trigger scale-up (it wouldn't fit if a new node is added)"}},
		{name: "node selector of another group", groups: []nodeGroup{workers},
			pending:     []*corev1.Pod{pod("a", "1", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"group": "gpu"} })},
			wantTargets: map[string]int32{}, wantPods: map[string]string{"ns/a": reasonNotTriggered}},
		{name: "a taint repels an intolerant pod", groups: []nodeGroup{{ID: "MachineDeployment/infra/gpu", Max: 2, Replicas: 1, Registered: 1, Template: node("2", nil, gpu)}},
			pending: []*corev1.Pod{pod("a", "1"), pod("b", "1", func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
			})},
			wantTargets: map[string]int32{"MachineDeployment/infra/gpu": 2}, wantPods: map[string]string{"ns/a": reasonNotTriggered, "ns/b": reasonTriggered}},
		{name: "no template, no scale-up", groups: []nodeGroup{{ID: workers.ID, Max: 3}}, pending: []*corev1.Pod{pod("a", "1")},
			wantTargets: map[string]int32{}, wantPods: map[string]string{"ns/a": reasonNotTriggered}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := planScaleUp(tc.groups, tc.pending)
			if len(plan.Targets) != len(tc.wantTargets) {
				t.Errorf("targets %v, want %v", plan.Targets, tc.wantTargets)
			}
			for id, want := range tc.wantTargets {
				if plan.Targets[id] != want {
					t.Errorf("targets %v, want %v", plan.Targets, tc.wantTargets)
				}
			}
			if len(plan.Pods) != len(tc.wantPods) {
				t.Errorf("pods %v, want reasons %v", plan.Pods, tc.wantPods)
			}
			for k, reason := range tc.wantPods {
				if plan.Pods[k].Reason != reason {
					t.Errorf("pod %s: %+v, want %s", k, plan.Pods[k], reason)
				}
			}
			for k, msg := range tc.wantMessage {
				if plan.Pods[k].Message != msg {
					t.Errorf("pod %s: message %q, want %q", k, plan.Pods[k].Message, msg)
				}
			}
		})
	}
}
