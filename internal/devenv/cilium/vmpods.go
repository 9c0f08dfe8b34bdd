package cilium

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/internal/devenv/vm"
)

// VMs is the node as the VMs' pod network: each VM's namespace becomes its
// virt-launcher pod's network here, resolving with the cluster DNS at nameserver
// (ServeClusterDNS's address).
func (n *Node) VMs(nameserver string) vm.PodNetwork { return vmPods{node: n, nameserver: nameserver} }

type vmPods struct {
	node       *Node
	nameserver string
}

// launcherContainer is virt-launcher's main container (KubeVirt names it "compute").
var launcherContainer = corev1.Container{Name: "compute", Image: "quay.io/kubevirt/virt-launcher"}

func (v vmPods) Attach(ctx context.Context, pod vm.Pod, netns string) (string, error) {
	p, err := v.node.AttachPod(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, Labels: pod.Labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{launcherContainer}},
	}, netns)
	if err != nil {
		return "", err
	}
	return p.IP(), nil
}

func (v vmPods) Detach(ctx context.Context, pod vm.Pod, _ string) error {
	key := client.ObjectKey{Namespace: pod.Namespace, Name: pod.Name}
	v.node.mu.Lock()
	p := v.node.pods[key.String()]
	v.node.mu.Unlock()
	if p != nil {
		return p.Delete(ctx)
	}
	// Never attached (a failed boot), or attached by an earlier node: only the object
	// may be left.
	obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
	if err := v.node.o.Client.Delete(ctx, obj, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

func (v vmPods) Nameserver() string { return v.nameserver }
