package vm

import (
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// ClusterDomain is the management cluster's DNS domain.
const ClusterDomain = "cluster.local"

// resolvConf is the VM's /etc/resolv.conf, as virt-launcher's pod hands it to the VM
// (over DHCP): the cluster's resolver, and the search path that makes
// <service>.<namespace>.svc a name (Kamaji writes such names into the kubeconfigs a
// node joins with: cluster-info's server is https://<tcp>.<ns>.svc:<port>).
func resolvConf(nameserver string) string {
	return "search svc." + ClusterDomain + " " + ClusterDomain + "\nnameserver " + nameserver + "\noptions ndots:5\n"
}

// dnsServer answers the VM's A queries for <service>.<namespace>.svc.cluster.local with
// the Service's ClusterIP, as the management cluster's DNS does; every other name is
// NXDOMAIN (nothing here resolves the outside world). It listens in the VM's network
// namespace, on the VM's address.
type dnsServer struct {
	conn   net.PacketConn
	lookup func(service, namespace string) (string, bool)
	wg     sync.WaitGroup
}

func startDNS(netns, ip string, lookup func(service, namespace string) (string, bool)) (*dnsServer, error) {
	conn, err := listenPacketIn(netns, ip+":53")
	if err != nil {
		return nil, err
	}
	s := &dnsServer{conn: conn, lookup: lookup}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

func (s *dnsServer) close() {
	_ = s.conn.Close()
	s.wg.Wait()
}

func (s *dnsServer) serve() {
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
func (s *dnsServer) answer(query []byte) []byte {
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
func (s *dnsServer) resolve(name string) (netip.Addr, bool) {
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
