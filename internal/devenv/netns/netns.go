// Package netns opens sockets inside named network namespaces (/run/netns/<name>, as
// `ip netns add` makes them), for the test bed's VMs and pods: a socket stays in the
// namespace it was made in, so a listener opened here serves that namespace's traffic,
// and a connection dialled here leaves through that namespace's routes and interfaces,
// as a process inside it would. It also serves the management cluster's DNS from one.
package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Path is where `ip netns` keeps a named namespace.
func Path(name string) string { return "/run/netns/" + name }

// Listen opens a TCP listener in the named network namespace.
func Listen(name, addr string) (net.Listener, error) {
	var l net.Listener
	err := Do(name, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// ListenPacket opens a UDP socket in the named network namespace.
func ListenPacket(name, addr string) (net.PacketConn, error) {
	var c net.PacketConn
	err := Do(name, func() (err error) {
		c, err = net.ListenPacket("udp", addr)
		return err
	})
	return c, err
}

// Dial connects from inside the named network namespace (network "tcp" or "udp"),
// giving up after timeout: what a process there would see, a policy's drop included (a
// dropped SYN is a timeout, not a refusal).
func Dial(ctx context.Context, name, network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := Do(name, func() (err error) {
		// The socket is made on this thread, in the namespace; the handshake that
		// follows runs wherever the runtime puts it, on the same socket.
		d := net.Dialer{Timeout: timeout}
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Do runs open (which makes sockets) on a thread inside the named network namespace, and
// brings the thread back (a socket stays in the namespace it was made in). A thread that
// cannot go back is never reused: it stays locked and ends with its goroutine.
func Do(name string, open func() error) error {
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
		target, err := os.Open(Path(name))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("entering %s: %w", name, err)
			return
		}
		openErr := open()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("leaving %s: %w (the sockets opened stay open)", name, err)
			return // the thread stays locked: it dies with this goroutine
		}
		runtime.UnlockOSThread()
		ch <- openErr
	}()
	return <-ch
}
