package netns

import (
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// ClusterDomain is the management cluster's DNS domain.
const ClusterDomain = "cluster.local"

// ResolvConf is a VM's /etc/resolv.conf, as virt-launcher's pod hands it to the VM
// (over DHCP): the cluster's resolver, and the search path that makes
// <service>.<namespace>.svc a name (Kamaji writes such names into the kubeconfigs a
// node joins with: cluster-info's server is https://<tcp>.<ns>.svc:<port>).
func ResolvConf(nameserver string) string {
	return "search svc." + ClusterDomain + " " + ClusterDomain + "\nnameserver " + nameserver + "\noptions ndots:5\n"
}

// DNS answers A queries for <service>.<namespace>.svc.cluster.local with the Service's
// ClusterIP, as the management cluster's DNS does; every other name is NXDOMAIN (nothing
// here resolves the outside world). It listens in a network namespace: a standalone VM's
// own, or the management node's kube-dns pod's.
type DNS struct {
	conn   net.PacketConn
	lookup func(service, namespace string) (string, bool)
	wg     sync.WaitGroup
}

// ServeDNS serves the management cluster's names on addr (ip:53) in the named network
// namespace, from lookup (a Service's ClusterIP by name).
func ServeDNS(name, addr string, lookup func(service, namespace string) (string, bool)) (*DNS, error) {
	conn, err := ListenPacket(name, addr)
	if err != nil {
		return nil, err
	}
	s := &DNS{conn: conn, lookup: lookup}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Close stops serving.
func (s *DNS) Close() {
	_ = s.conn.Close()
	s.wg.Wait()
}

func (s *DNS) serve() {
	defer s.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if reply := s.answer(buf[:n]); reply != nil {
			_, _ = s.conn.WriteTo(reply, from)
		}
	}
}

// answer builds the reply to one query, nil for what is not a query.
func (s *DNS) answer(query []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	reply := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RCode: dnsmessage.RCodeNameError}, Questions: []dnsmessage.Question{q}}
	if ip, ok := s.resolve(q.Name.String()); ok {
		reply.RCode = dnsmessage.RCodeSuccess
		if q.Type == dnsmessage.TypeA {
			reply.Answers = []dnsmessage.Resource{{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5},
				Body:   &dnsmessage.AResource{A: ip.As4()},
			}}
		}
	}
	b, err := reply.Pack()
	if err != nil {
		return nil
	}
	return b
}

// resolve maps <service>.<namespace>.svc.cluster.local. to the Service's ClusterIP.
func (s *DNS) resolve(name string) (netip.Addr, bool) {
	rest, ok := strings.CutSuffix(strings.ToLower(name), ".svc."+ClusterDomain+".")
	if !ok {
		return netip.Addr{}, false
	}
	svc, ns, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(ns, ".") {
		return netip.Addr{}, false
	}
	ip, ok := s.lookup(svc, ns)
	if !ok {
		return netip.Addr{}, false
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil || !addr.Is4() {
		return netip.Addr{}, false
	}
	return addr, true
}
