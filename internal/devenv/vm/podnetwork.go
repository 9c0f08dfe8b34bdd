package vm

import "context"

// PodNetwork is the management cluster's pod network, for VMs that live in pods as
// KubeVirt's do: each VM's network namespace is the network of its virt-launcher pod on
// a management node, so the VM's traffic leaves through that pod's interface and the
// node's CNI (a real Cilium in the test bed) enforces the pod's policies on it.
type PodNetwork interface {
	// Attach makes the pod (its object included) and plumbs the named network namespace
	// as its network: eth0, its address (returned) and the default route.
	Attach(ctx context.Context, pod Pod, netns string) (ip string, err error)
	// Detach removes the pod's interface and its object; a pod already gone is no error.
	Detach(ctx context.Context, pod Pod, netns string) error
	// Nameserver is the cluster DNS the pods resolve with (the kube-dns Service's
	// ClusterIP).
	Nameserver() string
}

// Pod is a VM's pod on a PodNetwork, as KubeVirt makes it for a VirtualMachineInstance:
// virt-launcher-<vmi>-<suffix> in the VMI's namespace, with the VMI's labels and
// kubevirt.io=virt-launcher.
type Pod struct {
	Namespace, Name string
	Labels          map[string]string
}
