package remote

import (
	"crypto/sha256"
	"encoding/binary"
)

// AdminCredentialMemo is what the operator keeps of a plane's last admin kubeconfig that
// parsed: the digest of its bytes and of the servers it was checked against, and the
// credential's server, identity and hash, never its key. ParseAdminKubeconfig is a
// function of those two inputs, so a pass over an unchanged Secret costs a hash of it
// instead of a YAML decode, two certificate parses and a key check. The zero value
// remembers nothing; the caller keeps one per plane (the controllers' planeState).
type AdminCredentialMemo struct {
	digest                 [sha256.Size]byte
	server, identity, hash string
}

// Parse is ParseAdminKubeconfig(data, servers), without the parse when the memo was made
// of the same data and servers. It returns the memo to keep in place of this one: the
// new credential's, or the zero memo when the kubeconfig is refused (a refused kubeconfig
// is never remembered: it is parsed again, and refused again, each pass; nor is the
// earlier credential kept). It is pure.
func (m AdminCredentialMemo) Parse(data []byte, servers []string) (*AdminCredential, AdminCredentialMemo, error) {
	d := credentialDigest(data, servers)
	if m.Held() && m.digest == d {
		return &AdminCredential{Server: m.server, Identity: m.identity, Hash: m.hash, kubeconfig: data}, m, nil
	}
	cred, err := ParseAdminKubeconfig(data, servers)
	if err != nil {
		return nil, AdminCredentialMemo{}, err
	}
	return cred, AdminCredentialMemo{digest: d, server: cred.Server, identity: cred.Identity, hash: cred.Hash}, nil
}

// Held reports whether the memo remembers a credential.
func (m AdminCredentialMemo) Held() bool { return m != AdminCredentialMemo{} }

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
