package main

import (
	"fmt"
	"net"
	"net/url"

	"github.com/cozystack/computeplane/internal/devenv/cilium"
)

// egress shows, from inside the plane's node, what the operator's CiliumNetworkPolicies
// refuse: the node is a VM whose network is its virt-launcher pod's on the management
// node, where the real cilium-agent enforces them. Each refusal must be a dropped packet
// that the agent counts for the rule that should refuse it, and each address must answer
// the management node itself (so the path exists); the demo fails otherwise.
func (w *walkthrough) egress() error {
	names := w.vms.Names()
	if len(names) != 1 {
		return fmt.Errorf("the plane has %d VMs (%v), want its one node", len(names), names)
	}
	v, _ := w.vms.Get(names[0])
	u, err := url.Parse(w.mgmt.Config.Host)
	if err != nil {
		return err
	}
	step("From inside the plane's node " + v.Name + " (its VM's network is its virt-launcher pod's on the management node, address " + v.Address() + "), the real cilium-agent enforces the operator's policies on real packets")
	for _, c := range []struct{ what, addr, reason string }{
		{"the management kube-apiserver (the kubernetes Service's endpoint): the baseline's deny rule", net.JoinHostPort(cilium.HostIP, u.Port()), cilium.DropDenylist},
		{"an address outside the cluster: the class's internet: Deny", cilium.WorldAddr, cilium.DropPolicyDenied},
	} {
		if _, err := cilium.Reach(w.ctx, w.node.Netns(), c.addr); err != nil {
			return fmt.Errorf("%s (%s) does not answer the management node itself (%v): its refusal would prove nothing", c.what, c.addr, err)
		}
		before, after, err := w.node.CheckRefused(w.ctx, v.Netns(), c.addr, c.reason)
		if err != nil {
			return fmt.Errorf("from the plane's node, %s: %w", c.what, err)
		}
		fmt.Printf("    %s, %s: the management node reaches it; from the plane's node the connection times out, and the agent's %q drops went %v → %v (refused, as it must be)\n",
			c.addr, c.what, c.reason, before, after)
	}
	return nil
}
