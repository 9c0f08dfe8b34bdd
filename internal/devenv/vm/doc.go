// Package vm stands in for what KubeVirt and a node image give a Cluster API machine: a
// "VM" that boots from the bootstrap data Cluster API's kubeadm bootstrap provider renders
// and joins its plane as a real node. KubeVirt cannot run here (the machine's /dev/kvm is a
// paravirtual nested KVM that stock guest kernels die on), so a VM is a set of Linux
// namespaces with real node software inside:
//
//   - its own network namespace, whose eth0 is a veth to the host or, on a PodNetwork
//     (the management node of internal/devenv/cilium), its virt-launcher pod's interface,
//     policed by that node's Cilium; and its own UTS namespace with the VM's hostname (CAPK
//     gives a VM its KubevirtMachine's name as local-hostname);
//   - its own mount namespace: a private /run and its own /etc/kubernetes,
//     /var/lib/kubelet, /etc/cni/net.d and pod log directories (the VM's disk), the rest
//     of the host's filesystem shared (the disk image's binaries);
//   - Debian's containerd and runc, the images a node image preloads (there is no
//     registry), a bridge CNI network for its pods;
//   - the kubelet built from k8s.io/kubernetes, run as kubeadm's systemd drop-in
//     (10-kubeadm.conf) runs it, restarted when it exits;
//   - cloud-init: the bootstrap data's write_files and runcmd, in order, as root, with the
//     kubeadm built from k8s.io/kubernetes on PATH, so `kubeadm join` with the
//     configuration the operator's KubeadmConfigTemplate produced is what joins the node.
//
// Where the stand-in departs from a real VM it says so where it does it: the kubelet's
// cgroup driver and root (no systemd, one host for many nodes), and the kubeadm preflight
// checks that judge the host rather than the bootstrap data.
package vm
