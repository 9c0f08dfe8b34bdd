package vm

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// network is one VM's link to the host: a network namespace whose eth0 is one end of a
// veth pair, the host's end addressed in 10.251.<index>.0/24 (host .1, VM .2, the VM's
// default route), as a virt-launcher pod's interface is the VM's way out. The VM's pods
// are bridged in 10.252.<index>.0/24.
type network struct {
	index   int
	netns   string
	hostIf  string
	hostIP  string
	guestIP string
	podCIDR string
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
func (n network) create() error {
	n.destroy()
	guestTmp := n.hostIf + "g"
	steps := [][]string{
		{"ip", "netns", "add", n.netns},
		{"ip", "link", "add", n.hostIf, "type", "veth", "peer", "name", guestTmp},
		{"ip", "link", "set", guestTmp, "netns", n.netns},
		{"ip", "addr", "add", n.hostIP + "/24", "dev", n.hostIf},
		{"ip", "link", "set", n.hostIf, "up"},
		{"ip", "-n", n.netns, "link", "set", guestTmp, "name", "eth0"},
		{"ip", "-n", n.netns, "addr", "add", n.guestIP + "/24", "dev", "eth0"},
		{"ip", "-n", n.netns, "link", "set", "eth0", "up"},
		{"ip", "-n", n.netns, "link", "set", "lo", "up"},
		{"ip", "-n", n.netns, "route", "add", "default", "via", n.hostIP},
		// What a node's kubeadm preflight and its pods' routing need.
		{"ip", "netns", "exec", n.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			n.destroy()
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// destroy removes the namespace; the veth pair goes with it.
func (n network) destroy() {
	_ = exec.Command("ip", "netns", "del", n.netns).Run()
	_ = exec.Command("ip", "link", "del", n.hostIf).Run()
}

// routeServices sends the VM's TCP to the management cluster's Service network (and its
// pods') to the forwarder, which plays the management node's kube-proxy: the VM reaches
// Services by their ClusterIPs, the plane's control plane among them.
func (n network) routeServices(serviceCIDR string, forwarderPort int) error {
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

func startForwarder(netns, ip string, resolve func(string) (string, bool)) (*forwarder, error) {
	l, err := listenIn(netns, ip+":0")
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
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	_ = c.Close()
	_ = up.Close()
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

// listenIn opens a TCP listener in the named network namespace.
func listenIn(netns, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNetns(netns, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// listenPacketIn opens a UDP socket in the named network namespace.
func listenPacketIn(netns, addr string) (net.PacketConn, error) {
	var c net.PacketConn
	err := inNetns(netns, func() (err error) {
		c, err = net.ListenPacket("udp", addr)
		return err
	})
	return c, err
}

// inNetns runs open (which makes sockets) on a thread inside the named network
// namespace, and brings the thread back (a socket stays in the namespace it was made
// in). A thread that cannot go back is never reused: it stays locked and ends with its
// goroutine.
func inNetns(netns string, open func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer home.Close()
		target, err := os.Open("/run/netns/" + netns)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("entering %s: %w", netns, err)
			return
		}
		openErr := open()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("leaving %s: %w (the sockets opened stay open)", netns, err)
			return // the thread stays locked: it dies with this goroutine
		}
		runtime.UnlockOSThread()
		ch <- openErr
	}()
	return <-ch
}
