package remote

import "k8s.io/client-go/rest"

// SameConnection reports whether two Planes' clients share one connection (one
// credential's transport, mapper and watches).
func SameConnection(a, b *Plane) bool { return a.conn == b.conn }

// KeptCredentialBytes is how much of the admin credential's key and certificates the
// plane's connection keeps outside its transports.
func KeptCredentialBytes(p *Plane) int {
	n := 0
	for _, c := range []*rest.Config{p.conn.config, p.conn.clientConfig, p.conn.canaryConfig} {
		n += len(c.KeyData) + len(c.CertData) + len(c.CAData) + len(c.KeyFile) + len(c.CertFile) + len(c.CAFile)
	}
	return n
}
