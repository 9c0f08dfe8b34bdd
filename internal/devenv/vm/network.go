package vm

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cozystack/computeplane/internal/devenv/netns"
)

// network is one VM's link to the world: a network namespace whose eth0 is either one end
// of a veth pair, the host's end addressed in 10.251.<index>.0/24 (host .1, VM .2, the
// VM's default route), or, on a PodNetwork, the interface of the VM's pod on the
// management node (as a virt-launcher pod's interface is the VM's way out, policed by
// the node's CNI). The VM's pods are bridged in 10.252.<index>.0/24.
type network struct {
	index   int
	netns   string
	hostIf  string
	hostIP  string
	guestIP string
	podCIDR string
	// pods and pod, on a PodNetwork: the VM's pod there.
	pods PodNetwork
	pod  Pod
}

func newNetwork(index int) network {
	return network{
		index:   index,
		netns:   fmt.Sprintf("computeplane-vm-%d", index),
		hostIf:  fmt.Sprintf("cpvm%d", index),
		hostIP:  fmt.Sprintf("10.251.%d.1", index),
		guestIP: fmt.Sprintf("10.251.%d.2", index),
		podCIDR: fmt.Sprintf("10.252.%d.0/24", index),
	}
}

// create makes the namespace and the link, removing what a crashed run left under the
// same names first (the index is held under a host lock, so nothing live has them).
func (n *network) create(ctx context.Context) error {
	n.destroy()
	if n.pods != nil {
		return n.attach(ctx)
	}
	link := netns.Link{Name: n.netns, HostIf: n.hostIf, HostIP: n.hostIP, IP: n.guestIP, Prefix: 24}
	// What a node's kubeadm preflight and its pods' routing need.
	if err := link.Create([]string{"ip", "netns", "exec", n.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"}); err != nil {
		n.destroy()
		return err
	}
	return nil
}

// attach makes the namespace the network of the VM's pod.
func (n *network) attach(ctx context.Context) error {
	if err := netns.Run([]string{"ip", "netns", "add", n.netns}, []string{"ip", "-n", n.netns, "link", "set", "lo", "up"}); err != nil {
		n.destroy()
		return err
	}
	ip, err := n.pods.Attach(ctx, n.pod, n.netns)
	if err != nil {
		n.destroy()
		return fmt.Errorf("attaching the VM to its pod %s/%s: %w", n.pod.Namespace, n.pod.Name, err)
	}
	n.guestIP = ip
	if err := netns.Run([]string{"ip", "netns", "exec", n.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"}); err != nil {
		n.destroy()
		return err
	}
	return nil
}

// destroy removes the namespace; the veth pair, or the pod's interface, goes with it (a
// pod is detached first, so its network forgets it).
func (n *network) destroy() {
	if n.pods != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = n.pods.Detach(ctx, n.pod, n.netns)
		cancel()
	}
	netns.Link{Name: n.netns, HostIf: n.hostIf}.Destroy()
}

// routeServices sends the VM's TCP to the management cluster's Service network (and its
// pods') to the forwarder, which plays the management node's kube-proxy: the VM reaches
// Services by their ClusterIPs, the plane's control plane among them.
func (n *network) routeServices(serviceCIDR string, forwarderPort int) error {
	to := fmt.Sprintf("%s:%d", n.guestIP, forwarderPort)
	for _, chain := range []string{"OUTPUT", "PREROUTING"} {
		args := []string{"netns", "exec", n.netns, "iptables", "-w", "-t", "nat", "-A", chain, "-p", "tcp", "-d", serviceCIDR, "-j", "DNAT", "--to-destination", to}
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables in %s: %v: %s", n.netns, err, out)
		}
	}
	return nil
}

// forwarder accepts the VM's Service connections and dials, for each, the local address
// resolve gives for the address the VM asked for, read back from the NAT with
// SO_ORIGINAL_DST. Its socket is in the VM's network namespace (where the NAT is: the
// host's conntrack knows nothing of it), on the VM's address; it dials from the host's.
// An address resolve does not know is refused (the connection is closed): nothing but
// mapped Services is reachable this way.
type forwarder struct {
	listener net.Listener
	resolve  func(hostPort string) (string, bool)
	wg       sync.WaitGroup
}

func startForwarder(name, ip string, resolve func(string) (string, bool)) (*forwarder, error) {
	l, err := netns.Listen(name, ip+":0")
	if err != nil {
		return nil, err
	}
	f := &forwarder{listener: l, resolve: resolve}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *forwarder) port() int { return f.listener.Addr().(*net.TCPAddr).Port }

func (f *forwarder) close() {
	_ = f.listener.Close()
	f.wg.Wait()
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.listener.Accept()
		if err != nil {
			return
		}
		go f.forward(c.(*net.TCPConn))
	}
}

func (f *forwarder) forward(c *net.TCPConn) {
	dst, err := originalDst(c)
	if err != nil {
		_ = c.Close()
		return
	}
	to, ok := f.resolve(dst)
	if !ok {
		_ = c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", to, 10*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	netns.Splice(c, up)
}

// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h).
const soOriginalDst = 80

// originalDst is the address a NATed connection was sent to.
func originalDst(c *net.TCPConn) (string, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var addr syscall.RawSockaddrInet4
	var sockErr error
	err = raw.Control(func(fd uintptr) {
		size := uint32(unsafe.Sizeof(addr))
		_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_IP, soOriginalDst,
			uintptr(unsafe.Pointer(&addr)), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 {
			sockErr = errno
		}
	})
	if err != nil {
		return "", err
	}
	if sockErr != nil {
		return "", sockErr
	}
	port := int(addr.Port>>8) | int(addr.Port&0xff)<<8
	return fmt.Sprintf("%d.%d.%d.%d:%d", addr.Addr[0], addr.Addr[1], addr.Addr[2], addr.Addr[3], port), nil
}
