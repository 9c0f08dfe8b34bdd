package remote

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// AdminCredentials remembers, per plane, the last admin kubeconfig that parsed, by the
// digest of its bytes and of the servers it was checked against: ParseAdminKubeconfig is
// a function of those two, so a pass over an unchanged Secret costs a hash of it instead
// of a YAML decode, two certificate parses and a key check. It keeps each credential's
// server, identity and
// hash, never its key. A nil *AdminCredentials parses every time.
type AdminCredentials struct {
	mu     sync.Mutex
	parsed map[types.NamespacedName]parsedCredential
}

type parsedCredential struct {
	digest                 [sha256.Size]byte
	server, identity, hash string
}

// Parse is ParseAdminKubeconfig(data, servers), remembered for the plane key. A refused
// kubeconfig is never remembered: it is parsed again, and refused again, each pass.
func (a *AdminCredentials) Parse(key types.NamespacedName, data []byte, servers []string) (*AdminCredential, error) {
	if a == nil {
		return ParseAdminKubeconfig(data, servers)
	}
	d := credentialDigest(data, servers)
	a.mu.Lock()
	p, ok := a.parsed[key]
	a.mu.Unlock()
	if ok && p.digest == d {
		return &AdminCredential{Server: p.server, Identity: p.identity, Hash: p.hash, kubeconfig: data}, nil
	}
	cred, err := ParseAdminKubeconfig(data, servers)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		delete(a.parsed, key)
		return nil, err
	}
	if a.parsed == nil {
		a.parsed = map[types.NamespacedName]parsedCredential{}
	}
	a.parsed[key] = parsedCredential{digest: d, server: cred.Server, identity: cred.Identity, hash: cred.Hash}
	return cred, nil
}

// Forget drops what is remembered of a plane (deleted, or no longer this shard's).
func (a *AdminCredentials) Forget(key types.NamespacedName) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.parsed, key)
}

// Remembers reports whether a credential of the plane is remembered.
func (a *AdminCredentials) Remembers(key types.NamespacedName) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.parsed[key]
	return ok
}

// credentialDigest hashes the kubeconfig and the servers, each length-prefixed, so no
// two different inputs share a digest by where one ends and the next begins.
func credentialDigest(data []byte, servers []string) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	write := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	write(data)
	for _, s := range servers {
		write([]byte(s))
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}
