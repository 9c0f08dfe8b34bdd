package remote

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Plane is a live connection to one ComputePlane's API server.
type Plane struct {
	// Client talks to the plane as the operator (its admin credential).
	Client client.Client
	// Identity is the user name the plane's API server sees for the operator, so
	// admission policies can let it (and nobody else) change what it owns.
	Identity string
	// Version the plane's API server reports.
	Version string
}

// UnreachableError says a plane's API server does not answer. Past reports whether it
// has failed for longer than the cache's grace period, which is when a condition should
// say so; before that the caller just looks again.
type UnreachableError struct {
	Since time.Time
	Past  bool
	Err   error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("the plane's API server has not answered since %s: %v", e.Since.UTC().Format(time.RFC3339), e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// ClusterCache keeps one client per ComputePlane, built lazily from the admin kubeconfig
// and rebuilt when that kubeconfig changes (Kamaji rotates it). Before handing a client
// out it checks the plane answers (at most once per ProbeInterval), so callers never
// block on a dead plane: they get an UnreachableError at once. The admin kubeconfig
// stays inside the operator's process.
type ClusterCache struct {
	Scheme *runtime.Scheme
	// Timeout bounds every request to a plane.
	Timeout time.Duration
	// ProbeInterval is how long a successful probe is trusted.
	ProbeInterval time.Duration
	// Grace is how long a plane may fail before UnreachableError.Past is set.
	Grace time.Duration

	mu      sync.Mutex
	entries map[types.NamespacedName]*entry
}

type entry struct {
	hash         string
	plane        Plane
	disco        discovery.DiscoveryInterface
	probedAt     time.Time
	failingSince time.Time
}

// Get returns the plane's connection, building or rebuilding it as needed.
func (c *ClusterCache) Get(ctx context.Context, key types.NamespacedName, kubeconfig []byte) (*Plane, error) {
	sum := sha256.Sum256(kubeconfig)
	hash := hex.EncodeToString(sum[:])

	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e == nil || e.hash != hash {
		built, err := c.build(kubeconfig, hash)
		if err != nil {
			return nil, err
		}
		if e != nil {
			built.failingSince = e.failingSince
		}
		e = built
		c.mu.Lock()
		if c.entries == nil {
			c.entries = map[types.NamespacedName]*entry{}
		}
		c.entries[key] = e
		c.mu.Unlock()
	}
	return c.probe(e)
}

// Remove forgets a plane (it is being deleted).
func (c *ClusterCache) Remove(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

func (c *ClusterCache) probe(e *entry) (*Plane, error) {
	c.mu.Lock()
	fresh := !e.probedAt.IsZero() && time.Since(e.probedAt) < c.ProbeInterval
	c.mu.Unlock()
	if fresh {
		return &e.plane, nil
	}
	v, err := e.disco.ServerVersion()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		e.probedAt = time.Time{}
		if e.failingSince.IsZero() {
			e.failingSince = time.Now()
		}
		return nil, &UnreachableError{Since: e.failingSince, Past: time.Since(e.failingSince) >= c.Grace, Err: err}
	}
	e.probedAt, e.failingSince = time.Now(), time.Time{}
	e.plane.Version = v.GitVersion
	return &e.plane, nil
}

func (c *ClusterCache) build(kubeconfig []byte, hash string) (*entry, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("the admin kubeconfig is not usable: %w", err)
	}
	identity, err := certificateUser(cfg)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = c.Timeout
	cfg.QPS, cfg.Burst = 50, 100
	cl, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &entry{hash: hash, plane: Plane{Client: cl, Identity: identity}, disco: disco}, nil
}

// certificateUser is the user name a client certificate authenticates as (its CN).
// Kamaji's admin kubeconfig authenticates with a certificate.
func certificateUser(cfg *rest.Config) (string, error) {
	data := cfg.CertData
	if len(data) == 0 {
		return "", errors.New("the admin kubeconfig has no client certificate, so the operator cannot tell its own identity in the plane")
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return "", errors.New("the admin kubeconfig's client certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("the admin kubeconfig's client certificate: %w", err)
	}
	if cert.Subject.CommonName == "" {
		return "", errors.New("the admin kubeconfig's client certificate has no common name")
	}
	return cert.Subject.CommonName, nil
}
