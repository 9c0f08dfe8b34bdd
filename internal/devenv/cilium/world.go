package cilium

import (
	"io"
	"os/exec"

	"github.com/cozystack/computeplane/internal/devenv/netns"
)

// World is an address outside the cluster: a network namespace of its own beyond the
// host (neither a node nor a pod, so Cilium's "world"), reached from the node through
// the host's routing, answering on WorldAddr with its banner.
type World struct {
	listener io.Closer
}

// The world's addresses: the host's end of its veth, and its own.
const (
	worldNetns  = "computeplane-world"
	worldHostIf = "cpworld"
	worldHostIP = "10.249.0.1"
	WorldIP     = "10.249.0.2"
	WorldAddr   = WorldIP + ":80"
	// WorldBanner is what the world answers.
	WorldBanner = "hello from outside the cluster"
)

// StartWorld makes the world's namespace and starts its listener.
func StartWorld() (_ *World, err error) {
	w := &World{}
	w.destroy()
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	// The host forwards between the node and the world whatever its FORWARD chain's
	// policy (Docker's is DROP).
	if err := worldLink.Create(
		append([]string{"iptables", "-w", "-I", "FORWARD"}, forwardRule(hostIf, worldHostIf)...),
		append([]string{"iptables", "-w", "-I", "FORWARD"}, forwardRule(worldHostIf, hostIf)...),
	); err != nil {
		return nil, err
	}
	l, err := netns.Listen(worldNetns, WorldAddr)
	if err != nil {
		return nil, err
	}
	w.listener = serveBanner(l, WorldBanner)
	return w, nil
}

// Netns is the world's network namespace.
func (w *World) Netns() string { return worldNetns }

// worldLink is the world's namespace and its veth to the host.
var worldLink = netns.Link{Name: worldNetns, HostIf: worldHostIf, HostIP: worldHostIP, IP: WorldIP, Prefix: 24}

func forwardRule(in, out string) []string {
	return []string{"-i", in, "-o", out, "-j", "ACCEPT", "-m", "comment", "--comment", "computeplane test bed"}
}

func (w *World) destroy() {
	for _, r := range [][]string{forwardRule(hostIf, worldHostIf), forwardRule(worldHostIf, hostIf)} {
		for exec.Command("iptables", append([]string{"-w", "-D", "FORWARD"}, r...)...).Run() == nil {
		}
	}
	worldLink.Destroy()
}

// Close stops the listener and removes the namespace.
func (w *World) Close() {
	if w.listener != nil {
		_ = w.listener.Close()
	}
	w.destroy()
}
