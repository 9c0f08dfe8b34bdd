// Package cilium runs a node of the management cluster whose pods a real cilium-agent
// networks and polices, for the test bed's VMs: KubeVirt puts each VM in a virt-launcher
// pod, so the CiliumNetworkPolicies the operator writes for a plane are enforced on the
// VM's traffic where it leaves that pod. Here the node is a network namespace with a veth
// to the host (the machine's other "nodes" are the host itself, where the management and
// plane apiservers listen), the agent is cilium-agent built from the module the operator's
// policy types come from (test/tools/cilium.sh), and a pod is a network namespace plumbed
// by Cilium's own CNI plugin for a Pod object bound to the node, as the kubelet's
// container runtime would call it. What runs "in" a pod is the test's: a VM (its kubelet,
// containerd and pods), a listener, a forwarder to a host process.
//
// The management cluster has no kubelet and no controller-manager: the node plays the
// kubelet's part for its pods (the Pod object's status: phase, IPs, Ready), and runs the
// real kube-controller-manager with only the EndpointSlice controller, so Cilium's own
// service load-balancing translates a ClusterIP to the pods behind it, and a policy judges
// the pod a VM really reaches.
package cilium

// Version is the cilium-agent's, the module version of go.mod's github.com/cilium/cilium
// (test/tools/cilium.sh builds it).
const Version = "v1.18.4"
