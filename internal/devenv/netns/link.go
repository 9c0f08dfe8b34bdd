package netns

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
)

// Link is a network namespace joined to the host by a veth pair: the host's end HostIf
// with HostIP, the namespace's end eth0 with IP (both in a /Prefix), the namespace's
// default route through the host.
type Link struct {
	Name, HostIf, HostIP, IP string
	Prefix                   int
}

// Create makes the namespace and the pair, then runs more (ip, iptables, sysctl
// commands, in order). A failure leaves what was made for Destroy.
func (l Link) Create(more ...[]string) error {
	peer := l.HostIf + "p"
	steps := [][]string{
		{"ip", "netns", "add", l.Name},
		{"ip", "link", "add", l.HostIf, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", l.Name},
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", l.HostIP, l.Prefix), "dev", l.HostIf},
		{"ip", "link", "set", l.HostIf, "up"},
		{"ip", "-n", l.Name, "link", "set", peer, "name", "eth0"},
		{"ip", "-n", l.Name, "addr", "add", fmt.Sprintf("%s/%d", l.IP, l.Prefix), "dev", "eth0"},
		{"ip", "-n", l.Name, "link", "set", "eth0", "up"},
		{"ip", "-n", l.Name, "link", "set", "lo", "up"},
		{"ip", "-n", l.Name, "route", "add", "default", "via", l.HostIP},
	}
	return Run(append(steps, more...)...)
}

// Destroy removes the namespace and the pair (what a crashed run left too).
func (l Link) Destroy() {
	_ = exec.Command("ip", "netns", "del", l.Name).Run()
	_ = exec.Command("ip", "link", "del", l.HostIf).Run()
}

// Run runs each command in order, stopping at the first that fails.
func Run(steps ...[]string) error {
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// Splice copies between the two connections until both directions end (each half
// closed as its source ends), then closes both.
func Splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	half := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go half(a, b)
	go half(b, a)
	<-done
	<-done
	_ = a.Close()
	_ = b.Close()
}
