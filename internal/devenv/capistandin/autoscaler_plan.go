package capistandin

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
)

// nodeGroup is one MachineDeployment as the cluster-autoscaler's Cluster API provider
// sees it (cloudprovider/clusterapi/clusterapi_nodegroup.go): its bounds from the
// min/max-size annotations, its replicas, how many of its Machines have a Node, and a
// template of a new node (a Ready node of the group: the autoscaler's NodeInfo).
type nodeGroup struct {
	ID         string // MachineDeployment/<namespace>/<name>
	Min, Max   int32
	Replicas   int32
	Registered int32        // Machines of the group whose Node has joined
	Template   *corev1.Node // nil: nothing to simulate a new node from (no Node yet)
}

// scalePlan is one scan's outcome: each group's new replicas (only groups that grow),
// and what the autoscaler tells each pending pod (its event's reason and message); a pod
// that waits for a node already on its way is told nothing.
type scalePlan struct {
	Targets map[string]int32
	Pods    map[string]podVerdict // by namespace/name
}

type podVerdict struct{ Reason, Message string }

// The autoscaler's event reasons on a pod (core/scaleup/orchestrator: the pod triggered a
// scale-up, or could not).
const (
	reasonTriggered    = "TriggeredScaleUp"
	reasonNotTriggered = "NotTriggerScaleUp"
)

// planScaleUp plays the autoscaler's scale-up for the unschedulable pods: for each group
// in ID order (an expander's choice made deterministic), the pods that would fit an empty
// node of its template are packed first-fit onto its upcoming nodes (replicas not yet
// registered) and then onto new ones, as many as the group's max allows. A pod no group
// takes is told why: every group that would fit it is at its max, or none would fit it.
func planScaleUp(groups []nodeGroup, pending []*corev1.Pod) scalePlan {
	plan := scalePlan{Targets: map[string]int32{}, Pods: map[string]podVerdict{}}
	sorted := append([]nodeGroup(nil), groups...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	left := append([]*corev1.Pod(nil), pending...)
	atMax := map[string]int{}
	for _, g := range sorted {
		if g.Template == nil || len(left) == 0 {
			continue
		}
		// Free capacity of the group's upcoming nodes (asked for, not registered yet),
		// then of the nodes this scan adds.
		upcoming := int(max(0, g.Replicas-g.Registered))
		var bins []corev1.ResourceList
		for range upcoming {
			bins = append(bins, allocatable(g.Template))
		}
		added := int32(0)
		var rest, triggered []*corev1.Pod
		for _, p := range left {
			if !fitsTemplate(p, g.Template) {
				rest = append(rest, p)
				continue
			}
			bin := -1
			for i := range bins {
				if fits(requests(p), bins[i]) {
					bins[i] = subtract(bins[i], requests(p))
					bin = i
					break
				}
			}
			switch {
			case bin >= upcoming:
				// On a node this scan adds.
				delete(atMax, key(p))
				triggered = append(triggered, p)
			case bin >= 0:
				// It waits for a node already on its way: no event, as the autoscaler
				// leaves such pods be.
				delete(atMax, key(p))
			case g.Replicas+added < g.Max:
				bins = append(bins, subtract(allocatable(g.Template), requests(p)))
				added++
				delete(atMax, key(p))
				triggered = append(triggered, p)
			default:
				atMax[key(p)]++
				rest = append(rest, p)
			}
		}
		if added > 0 {
			plan.Targets[g.ID] = g.Replicas + added
		}
		for _, p := range triggered {
			plan.Pods[key(p)] = podVerdict{reasonTriggered, fmt.Sprintf("pod triggered scale-up: [{%s %d->%d (max: %d)}]", g.ID, g.Replicas, g.Replicas+added, g.Max)}
		}
		left = rest
	}
	for _, p := range left {
		msg := "pod didn't trigger scale-up (it wouldn't fit if a new node is added)"
		if n := atMax[key(p)]; n > 0 {
			msg = fmt.Sprintf("pod didn't trigger scale-up: %d max node group size reached", n)
		}
		plan.Pods[key(p)] = podVerdict{reasonNotTriggered, msg}
	}
	return plan
}

func key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// fitsTemplate is the scheduler's verdict on an empty new node of the template, for what
// the autoscaler simulates: the pod's requests within the node's allocatable, its node
// selector matched by the node's labels, every taint that repels it tolerated.
func fitsTemplate(p *corev1.Pod, node *corev1.Node) bool {
	for k, v := range p.Spec.NodeSelector {
		if node.Labels[k] != v {
			return false
		}
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule || strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			continue // a new node's condition taints go once it is Ready
		}
		tolerated := false
		for _, tol := range p.Spec.Tolerations {
			if tol.ToleratesTaint(klog.Background(), &t, false) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return false
		}
	}
	return fits(requests(p), allocatable(node))
}

// requests is what the pod asks of a node: its containers' requests summed, or its
// largest init container's where that is more, and one pod.
func requests(p *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}
	for _, c := range p.Spec.Containers {
		for name, q := range c.Resources.Requests {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	for _, c := range p.Spec.InitContainers {
		for name, q := range c.Resources.Requests {
			if q.Cmp(out[name]) > 0 {
				out[name] = q
			}
		}
	}
	return out
}

func allocatable(n *corev1.Node) corev1.ResourceList {
	if len(n.Status.Allocatable) > 0 {
		return n.Status.Allocatable.DeepCopy()
	}
	return n.Status.Capacity.DeepCopy()
}

// fits reports whether every request is within what is free.
func fits(req, free corev1.ResourceList) bool {
	for name, q := range req {
		f, ok := free[name]
		if !ok || q.Cmp(f) > 0 {
			return false
		}
	}
	return true
}

func subtract(free, req corev1.ResourceList) corev1.ResourceList {
	out := free.DeepCopy()
	for name, q := range req {
		f := out[name]
		f.Sub(q)
		out[name] = f
	}
	return out
}
