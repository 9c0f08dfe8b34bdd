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
	"sigs.k8s.io/controller-runtime/pkg/cache"
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
	// OnConnect, when set, is called with a fresh informer cache of the plane each time
	// the operator (re)connects to it, to register watches on the plane's own objects.
	// The cache is stopped when the plane is removed, its kubeconfig rotates, or it stays
	// unreachable past the grace period (and started again when it answers).
	OnConnect func(key types.NamespacedName, c cache.Cache) error

	mu      sync.Mutex
	entries map[types.NamespacedName]*entry
	// verified remembers the planes whose hardening was read back at least once, so a
	// difference found later is drift, even when the status in the cache lags behind.
	verified map[types.NamespacedName]bool
}

// SetVerified records whether the plane's hardening is, as far as the operator knows,
// as it applied it: true after a successful read-back, false once drift was reported
// (so the next pass restores instead of reporting it again).
func (c *ClusterCache) SetVerified(key types.NamespacedName, v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.verified == nil {
		c.verified = map[types.NamespacedName]bool{}
	}
	c.verified[key] = v
}

// WasVerified reports what SetVerified last recorded for the plane.
func (c *ClusterCache) WasVerified(key types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.verified[key]
}

type entry struct {
	key          types.NamespacedName
	hash         string
	config       *rest.Config
	plane        Plane
	disco        discovery.DiscoveryInterface
	probedAt     time.Time
	failingSince time.Time
	// stopWatches stops the plane's informer cache; nil while not watching.
	stopWatches context.CancelFunc
}

// Get returns the plane's connection, building or rebuilding it as needed.
func (c *ClusterCache) Get(ctx context.Context, key types.NamespacedName, kubeconfig []byte) (*Plane, error) {
	sum := sha256.Sum256(kubeconfig)
	hash := hex.EncodeToString(sum[:])

	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e == nil || e.hash != hash {
		built, err := c.build(key, kubeconfig, hash)
		if err != nil {
			return nil, err
		}
		if e != nil {
			built.failingSince = e.failingSince
			c.mu.Lock()
			e.stop()
			c.mu.Unlock()
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

// Existing returns the plane's connection if one was made and the plane answered its
// last probe, without a kubeconfig (for best-effort clean-up when the caller has none).
func (c *ClusterCache) Existing(key types.NamespacedName) (*Plane, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil || !e.failingSince.IsZero() {
		return nil, false
	}
	return &e.plane, true
}

// Remove forgets a plane (it is being deleted) and stops watching it.
func (c *ClusterCache) Remove(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		e.stop()
	}
	delete(c.entries, key)
	delete(c.verified, key)
}

// Watching reports whether the plane's objects are being watched.
func (c *ClusterCache) Watching(key types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	return e != nil && e.stopWatches != nil
}

// stop stops the entry's informers; the caller holds c.mu.
func (e *entry) stop() {
	if e.stopWatches != nil {
		e.stopWatches()
		e.stopWatches = nil
	}
}

// watch starts the plane's informer cache and lets OnConnect register its watches.
func (c *ClusterCache) watch(e *entry) error {
	if c.OnConnect == nil {
		return nil
	}
	pc, err := cache.New(e.config, cache.Options{Scheme: c.Scheme})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = pc.Start(ctx) }()
	if err := c.OnConnect(e.key, pc); err != nil {
		cancel()
		return err
	}
	c.mu.Lock()
	e.stopWatches = cancel
	c.mu.Unlock()
	return nil
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
	if err != nil {
		defer c.mu.Unlock()
		e.probedAt = time.Time{}
		if e.failingSince.IsZero() {
			e.failingSince = time.Now()
		}
		past := time.Since(e.failingSince) >= c.Grace
		if past {
			// Disconnect: informers retrying a dead plane only make noise.
			e.stop()
		}
		return nil, &UnreachableError{Since: e.failingSince, Past: past, Err: err}
	}
	e.probedAt, e.failingSince = time.Now(), time.Time{}
	e.plane.Version = v.GitVersion
	watching := e.stopWatches != nil
	c.mu.Unlock()
	if !watching {
		if err := c.watch(e); err != nil {
			return nil, fmt.Errorf("watching the plane: %w", err)
		}
	}
	return &e.plane, nil
}

func (c *ClusterCache) build(key types.NamespacedName, kubeconfig []byte, hash string) (*entry, error) {
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
	return &entry{key: key, hash: hash, config: cfg, plane: Plane{Client: cl, Identity: identity}, disco: disco}, nil
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
