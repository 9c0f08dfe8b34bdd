package devenv

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/internal/devenv/cilium"
)

// controlPlanePorts are the ports of a Kamaji control-plane pod a plane's nodes reach:
// the kube-apiserver (networkProfile.port, 6443 for every plane here) and konnectivity's
// server (not run here: a connection to it is closed).
var controlPlanePorts = []int{6443, 8132}

// ControlPlanePods gives every control-plane Deployment the pod runner plays a pod on the
// management node, so the plane's nodes reach their control plane as they do on a real
// management cluster: the Kamaji Service's ClusterIP, translated by Cilium to a pod whose
// labels are the Deployment's pod template's (kamaji.clastix.io/name, which the operator's
// baseline allows), policed on the way. The pod's ports forward to the process the pod
// runner serves the plane from (through the PlaneProxy's routes, so a rollout's new
// process is reached by the next connection). One pod per Deployment, made with the
// template's labels when the Deployment is first seen; deleted with the Deployment.
type ControlPlanePods struct {
	client client.Client
	node   *cilium.Node
	proxy  *PlaneProxy

	pods map[types.UID]*cilium.Pod // the loop's alone (Stop reads it once the loop ended)

	mu     sync.Mutex
	errs   map[types.UID]error // the loop writes, Errors reads
	cancel context.CancelFunc
	done   chan struct{}
}

// StartControlPlanePods starts the loop.
func StartControlPlanePods(ctx context.Context, c client.Client, node *cilium.Node, proxy *PlaneProxy) *ControlPlanePods {
	ctx, cancel := context.WithCancel(ctx)
	p := &ControlPlanePods{client: c, node: node, proxy: proxy, pods: map[types.UID]*cilium.Pod{}, errs: map[types.UID]error{},
		cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			p.pass(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return p
}

// Stop ends the loop and deletes the pods.
func (p *ControlPlanePods) Stop() {
	p.cancel()
	<-p.done
	for uid, pod := range p.pods {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = pod.Delete(ctx)
		cancel()
		delete(p.pods, uid)
	}
}

// Errors describes the Deployments whose pod could not be made, for failure messages.
func (p *ControlPlanePods) Errors() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for uid, err := range p.errs {
		out = append(out, fmt.Sprintf("%s: %v", uid, err))
	}
	return strings.Join(out, "; ")
}

func (p *ControlPlanePods) pass(ctx context.Context) {
	var list appsv1.DeploymentList
	if err := p.client.List(ctx, &list, client.MatchingLabels{kamajiProjectLabel: "kamaji", kamajiComponentLabel: "deployment"}); err != nil {
		return
	}
	seen := map[types.UID]bool{}
	for i := range list.Items {
		d := &list.Items[i]
		seen[d.UID] = true
		if _, ok := p.pods[d.UID]; ok || !d.DeletionTimestamp.IsZero() {
			continue
		}
		pod, err := p.run(ctx, d)
		if err == nil {
			p.pods[d.UID] = pod
		}
		p.mu.Lock()
		if err != nil {
			p.errs[d.UID] = err
		} else {
			delete(p.errs, d.UID)
		}
		p.mu.Unlock()
	}
	for uid, pod := range p.pods {
		if !seen[uid] {
			_ = pod.Delete(ctx)
			delete(p.pods, uid)
		}
	}
}

// run makes the Deployment's pod: named as a ReplicaSet's pod would be, with its
// template's labels and containers (names, images, ports).
func (p *ControlPlanePods) run(ctx context.Context, d *appsv1.Deployment) (*cilium.Pod, error) {
	tcp := d.Labels[kamajiNameLabel]
	var containers []corev1.Container
	for _, c := range d.Spec.Template.Spec.Containers {
		containers = append(containers, corev1.Container{Name: c.Name, Image: c.Image, Ports: c.Ports})
	}
	uid := strings.ReplaceAll(string(d.UID), "-", "")
	pod, err := p.node.RunPod(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name + "-" + uid[:10], Labels: d.Spec.Template.Labels},
		Spec:       corev1.PodSpec{Containers: containers},
	})
	if err != nil {
		return nil, err
	}
	if err := pod.Forward(controlPlanePorts, func(port int) (string, bool) {
		return p.proxy.Lookup(fmt.Sprintf("%s.%s.svc:%d", tcp, d.Namespace, port))
	}); err != nil {
		_ = pod.Delete(context.WithoutCancel(ctx))
		return nil, err
	}
	return pod, nil
}
