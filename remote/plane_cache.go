package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/cozystack/computeplane/remote/posture"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metascheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Plane is a live connection to one ComputePlane's API server.
type Plane struct {
	// Client talks to the plane as the operator (its admin credential). It reads the
	// API directly, never a cache.
	Client client.Client
	// Identity is the user name the plane's API server sees for the operator, so
	// admission policies can let it (and nobody else) change what it owns.
	Identity string
	// Version the plane's API server reports.
	Version string

	// conn is the connection the clients were built on.
	conn   *entry
	scheme *runtime.Scheme
}

// Canary is a client that impersonates CanaryUser with system:masters, for dry-run
// requests that the plane's policies must refuse. Only a plane not yet verified needs
// one, so it is built on demand.
func (p *Plane) Canary() (client.Client, error) {
	return client.New(p.conn.canaryConfig, client.Options{Scheme: p.scheme, HTTPClient: p.conn.canaryHTTP, Mapper: p.conn.mapper})
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
	return fmt.Sprintf("the plane's API server has not answered a read from its datastore since %s: %v", e.Since.UTC().Format(time.RFC3339), e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// ClusterCache keeps one client per ComputePlane, built from its admin credential and
// rebuilt when that credential changes (Kamaji rotates it). Before handing a client out
// it checks that the plane answers a read that needs its datastore (at most once per
// ProbeInterval): an API server whose etcd is gone still answers /version, so that is
// not enough. Callers never block on a dead plane: they get an UnreachableError at once.
// The credential stays inside the operator's process.
//
// It is a manager Runnable: the watches it starts for the planes live under the
// manager's context and stop with it.
type ClusterCache struct {
	Scheme *runtime.Scheme
	// Timeout bounds every request to a plane.
	Timeout time.Duration
	// ProbeInterval is how long a successful probe is trusted.
	ProbeInterval time.Duration
	// Grace is how long a plane may fail before UnreachableError.Past is set.
	Grace time.Duration
	// WatchSelector scopes the plane's watches of every kind but namespaces and mutating
	// admission policies to objects the operator labelled, so what a tenant creates in
	// its plane does not decide the operator's load. Namespaces (a new one must be
	// labelled) and mutating policies (any is a finding) are watched in full; only the
	// plane's cluster administrators can create them.
	WatchSelector labels.Selector
	// OnChange, when set, is called (besides the requests sent through Source) whenever
	// something the plane's watches follow
	// (WatchedResources) changes, each time they list again (after a failed watch or a
	// version too old to resume from: whatever happened while nothing watched is for the
	// caller to read), and when the cache's own probe fails (HealthInterval).
	// Their first lists, when the plane connects, are waited for by Get instead. The
	// watches stop when the plane is removed, its credential rotates, or it stays
	// unreachable past the grace period (they start again when it answers).
	OnChange func(key types.NamespacedName)
	// OnWatchEvent, when set, is told what the watches saw: the resource and
	// WatchListed (a list, the first ones included) or the event's type (ADDED, MODIFIED,
	// DELETED).
	OnWatchEvent func(resource, event string)
	// HealthInterval, when set, has the cache send the storage probe to every plane it
	// watches about this often (jittered), unless a caller's Get probed it meanwhile,
	// and wake the plane (Source, OnChange) when the probe fails: the watches report what
	// changes, the probe what cannot report itself (a datastore gone under a live API
	// server). A settled plane then needs no periodic pass of its own (SettledUntil).
	HealthInterval time.Duration
	// Log receives what cannot be returned to a caller (a watch that failed).
	Log logr.Logger

	once    sync.Once
	started chan struct{}
	ctx     context.Context

	mu      sync.Mutex
	entries map[types.NamespacedName]*entry
	// sourced: a controller watches Source, so every plane is watched; queues are the
	// started controllers' queues.
	sourced bool
	queues  []workqueue.TypedRateLimitingInterface[reconcile.Request]
}

type entry struct {
	key  types.NamespacedName
	hash string
	// config and watchHTTP are for the watches (no client timeout).
	config    *rest.Config
	watchHTTP *http.Client
	// The plane's clients are built for each caller from these (connect, Canary) rather than
	// kept: a controller-runtime client keeps a REST client, codecs and a rate limiter
	// for every kind it ever touched, about a tenth of a plane's memory at rest, and at
	// rest a plane is used only by the probe, which needs none of it.
	clientConfig, canaryConfig *rest.Config
	clientHTTP, canaryHTTP     *http.Client
	mapper                     meta.RESTMapper
	// probeClient sends the storage probe (one path, no kinds, no codecs).
	probeClient  rest.Interface
	identity     string
	version      string
	disco        discovery.DiscoveryInterface
	probedAt     time.Time
	failingSince time.Time
	// failedAt is the last failed probe: a failing plane is probed at most once per
	// ProbeInterval, so callers never wait on its timeout over and over.
	failedAt time.Time
	// lastErr is the error that began the failing streak (failingSince): what the
	// plane's conditions quote stays the same while it keeps failing.
	lastErr error
	// stopWatches stops the plane's watches; nil while not watching.
	stopWatches context.CancelFunc
	// changes counts what the watches reported (each change, each (re)list).
	changes uint64
	// settled is the last full read that found the plane as the operator left it.
	settled *settledRead
	// unsettled says why settled was dropped.
	unsettled string
}

// Why a plane gets a full read (Quiet): the label values of the operator's full-read
// counter.
const (
	UnsettledNeverRead      = "NeverRead"
	UnsettledNotVerified    = "NotVerified"
	UnsettledRequestFailed  = "RequestFailed"
	UnsettledProbeFailed    = "ProbeFailed"
	UnsettledWatchesStopped = "WatchesStopped"
	UnsettledNotWatched     = "NotWatched"
	UnsettledChanged        = "Changed"
	UnsettledWantChanged    = "SpecClassOrCredentialChanged"
	UnsettledResyncDue      = "ResyncDue"
	UnsettledFailing        = "Failing"
)

func (e *entry) unsettle(why string) {
	e.settled, e.unsettled = nil, why
}

// settledRead is a full read of a plane that found it as the operator left it.
type settledRead struct {
	// changes is the entry's count when the read began: any change since is news.
	changes     uint64
	fingerprint string
	// until is when the plane must be read in full again, quiet or not.
	until time.Time
}

func (c *ClusterCache) init() {
	c.once.Do(func() {
		c.started = make(chan struct{})
		c.entries = map[types.NamespacedName]*entry{}
	})
}

// Start runs the cache until ctx ends, then stops every plane's watches.
func (c *ClusterCache) Start(ctx context.Context) error {
	c.init()
	c.mu.Lock()
	c.ctx = ctx
	close(c.started)
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		e.stop()
	}
	return nil
}

// NeedLeaderElection: the watches feed the controller, which runs on the leader.
func (c *ClusterCache) NeedLeaderElection() bool { return true }

// Unsettle drops the plane's settled read (why is one of the Unsettled reasons): its
// next pass reads it in full. The reconciler calls it when it reported a drift, so the
// next pass restores instead of trusting the quiet watches.
func (c *ClusterCache) Unsettle(key types.NamespacedName, why string) {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		e.unsettle(why)
	}
}

// Mark is what Settled needs to know that nothing changed after a full read began: take
// it before the read. ok is false when nothing watches the plane.
func (c *ClusterCache) Mark(key types.NamespacedName) (mark uint64, ok bool) {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil || e.stopWatches == nil {
		return 0, false
	}
	return e.changes, true
}

// Settled records that a full read of the plane, begun at mark, found it as the operator
// left it for what fingerprint names (the wanted state: spec, class, credential). Until
// until, or until its watches report anything, the stop of its watches, a failed
// request or a drift, Quiet says no new full read is needed.
func (c *ClusterCache) Settled(key types.NamespacedName, mark uint64, fingerprint string, until time.Time) {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil && e.stopWatches != nil {
		e.settled = &settledRead{changes: mark, fingerprint: fingerprint, until: until}
	}
}

// Quiet reports whether the plane needs no full read now: one found it as the operator
// left it for the same fingerprint, before until, and its watches, running all along,
// reported nothing since that read began. It is the at-rest safety net's shortcut: a
// quiet plane costs its watches and the storage probe, nothing more. When the plane is
// not quiet, why says why (one of the Unsettled reasons).
func (c *ClusterCache) Quiet(key types.NamespacedName, fingerprint string, now time.Time) (quiet bool, why string) {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	switch {
	case e == nil || e.stopWatches == nil:
		return false, UnsettledNotWatched
	case e.settled == nil && e.unsettled == "":
		return false, UnsettledNeverRead
	case e.settled == nil:
		return false, e.unsettled
	case !e.failingSince.IsZero():
		return false, UnsettledFailing
	case e.settled.changes != e.changes:
		return false, UnsettledChanged
	case e.settled.fingerprint != fingerprint:
		return false, UnsettledWantChanged
	case !now.Before(e.settled.until):
		return false, UnsettledResyncDue
	}
	return true, ""
}

// changed counts a change the plane's watches saw and wakes the plane.
func (c *ClusterCache) changed(e *entry) {
	c.count(e)
	c.wake(e.key)
}

// wake tells OnChange and the controllers watching Source that the plane needs a pass.
func (c *ClusterCache) wake(key types.NamespacedName) {
	if c.OnChange != nil {
		c.OnChange(key)
	}
	c.mu.Lock()
	queues := c.queues
	c.mu.Unlock()
	for _, q := range queues {
		q.Add(reconcile.Request{NamespacedName: key})
	}
}

// count counts a change the plane's watches saw.
func (c *ClusterCache) count(e *entry) {
	c.mu.Lock()
	e.changes++
	c.mu.Unlock()
}

// Get returns the plane's connection, building or rebuilding it as needed.
func (c *ClusterCache) Get(ctx context.Context, key types.NamespacedName, cred *AdminCredential) (*Plane, error) {
	c.init()
	if cred == nil {
		return nil, errors.New("no admin credential")
	}
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e == nil || e.hash != cred.Hash {
		built, err := c.build(key, cred)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if e != nil {
			built.failingSince = e.failingSince
			e.stop()
		}
		c.entries[key] = built
		c.mu.Unlock()
		e = built
	}
	return c.probe(ctx, e)
}

// Failed tells the cache that a request to the plane failed as a probe would: the
// plane counts as not answering (for the grace period too) until its next probe, at
// most one ProbeInterval later, succeeds. Callers then do not wait on it over and over.
func (c *ClusterCache) Failed(key types.NamespacedName, err error) {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		e.unsettle(UnsettledRequestFailed)
		e.fail(err)
	}
}

// fail records a failed probe or request; the caller holds c.mu.
func (e *entry) fail(err error) {
	e.probedAt, e.failedAt = time.Time{}, time.Now()
	if e.failingSince.IsZero() {
		e.failingSince, e.lastErr = e.failedAt, err
	}
}

// Existing returns the plane's connection if one was made and the plane answers (a
// probe, unless the last one is fresh), without a credential: for revoking when the
// caller has none at hand.
func (c *ClusterCache) Existing(ctx context.Context, key types.NamespacedName) (*Plane, bool) {
	c.init()
	c.mu.Lock()
	e := c.entries[key]
	c.mu.Unlock()
	if e == nil {
		return nil, false
	}
	p, err := c.probe(ctx, e)
	return p, err == nil
}

// Remove forgets a plane (it is gone) and stops watching it.
func (c *ClusterCache) Remove(key types.NamespacedName) {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		e.stop()
	}
	delete(c.entries, key)
}

// Known reports whether the cache holds a connection to the plane.
func (c *ClusterCache) Known(key types.NamespacedName) bool {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[key] != nil
}

// Connection is what the cache knows of one plane's API server.
type Connection struct {
	Key types.NamespacedName
	// Up: the last probe (or request) succeeded and no later one failed.
	Up bool
	// Watching: the plane's watches run.
	Watching bool
}

// Connections lists the planes the cache holds a connection to, for metrics.
func (c *ClusterCache) Connections() []Connection {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Connection, 0, len(c.entries))
	for key, e := range c.entries {
		out = append(out, Connection{Key: key, Up: e.failingSince.IsZero() && !e.probedAt.IsZero(), Watching: e.stopWatches != nil})
	}
	return out
}

// stop stops the entry's watches; the caller holds c.mu.
func (e *entry) stop() {
	e.unsettle(UnsettledWatchesStopped)
	if e.stopWatches != nil {
		e.stopWatches()
		e.stopWatches = nil
	}
}

// watch starts the plane's watches under the cache's own context.
func (c *ClusterCache) watch(ctx context.Context, e *entry) error {
	c.mu.Lock()
	listened := c.OnChange != nil || c.sourced
	c.mu.Unlock()
	if !listened {
		return nil
	}
	select {
	case <-c.started:
	case <-ctx.Done():
		return fmt.Errorf("the cluster cache has not been started: %w", ctx.Err())
	}
	c.mu.Lock()
	if e.stopWatches != nil || c.entries[e.key] != e {
		// Watching already, or replaced (a rotated credential) or removed meanwhile.
		c.mu.Unlock()
		return nil
	}
	watchCtx, cancel := context.WithCancel(c.ctx)
	listed, err := c.watchPlane(watchCtx, e)
	if err != nil {
		c.mu.Unlock()
		cancel()
		return err
	}
	e.stopWatches = cancel
	c.mu.Unlock()
	if c.HealthInterval > 0 {
		go c.probeWhileWatched(watchCtx, e)
	}
	// The caller's full read is marked against what the watches report (Mark); a list
	// landing after that mark is a change, and the plane would be read in full again at
	// once. Wait (briefly) for the lists, so a plane just connected is read once.
	select {
	case <-listed:
	case <-time.After(c.Timeout):
	case <-ctx.Done():
	}
	return nil
}

func (c *ClusterCache) probe(ctx context.Context, e *entry) (*Plane, error) {
	c.mu.Lock()
	fresh := !e.probedAt.IsZero() && time.Since(e.probedAt) < c.ProbeInterval
	recentlyFailed := !e.failedAt.IsZero() && time.Since(e.failedAt) < c.ProbeInterval
	since, lastErr := e.failingSince, e.lastErr
	c.mu.Unlock()
	if fresh {
		return c.connect(e)
	}
	if recentlyFailed {
		return nil, &UnreachableError{Since: since, Past: time.Since(since) >= c.Grace, Err: lastErr}
	}
	if err := c.checkStorage(ctx, e); err != nil {
		return nil, err
	}
	c.mu.Lock()
	watching := e.stopWatches != nil
	c.mu.Unlock()
	if !watching {
		if err := c.watch(ctx, e); err != nil {
			return nil, fmt.Errorf("watching the plane: %w", err)
		}
	}
	return c.connect(e)
}

// checkStorage sends the storage probe and records its answer: the plane's version on
// its first success; on a failure an UnreachableError, and past the grace period the
// plane's watches stop (retrying a dead plane only makes noise).
func (c *ClusterCache) checkStorage(ctx context.Context, e *entry) error {
	err := readsFromStorage(ctx, e.probeClient)
	c.mu.Lock()
	version := e.version
	c.mu.Unlock()
	if err == nil && version == "" {
		info, verr := e.disco.ServerVersion()
		if err = verr; err == nil {
			version = info.GitVersion
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		e.unsettle(UnsettledProbeFailed)
		e.fail(err)
		past := time.Since(e.failingSince) >= c.Grace
		if past {
			e.stop()
		}
		return &UnreachableError{Since: e.failingSince, Past: past, Err: e.lastErr}
	}
	e.probedAt, e.failingSince, e.failedAt, e.lastErr = time.Now(), time.Time{}, time.Time{}, nil
	e.version = version
	return nil
}

// connect builds the plane's clients for one caller (see entry).
func (c *ClusterCache) connect(e *entry) (*Plane, error) {
	cl, err := client.New(e.clientConfig, client.Options{Scheme: c.Scheme, HTTPClient: e.clientHTTP, Mapper: e.mapper})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return &Plane{Client: cl, Identity: e.identity, Version: e.version, conn: e, scheme: c.Scheme}, nil
}

// readsFromStorage reads one object with a quorum read (a GET without a resource
// version goes to etcd, not to the API server's watch cache). NotFound is an answer too.
func readsFromStorage(ctx context.Context, c rest.Interface) error {
	return client.IgnoreNotFound(c.Get().AbsPath("/api/v1/namespaces/kube-system").Do(ctx).Error())
}

func (c *ClusterCache) build(key types.NamespacedName, cred *AdminCredential) (*entry, error) {
	// The watches' configuration has no client timeout: a watch is a request that
	// lasts minutes, and a timeout on it would end every watch after Timeout and open
	// it again (a dead connection is found by the HTTP/2 health check instead, and a
	// plane that stops answering is disconnected by the probe).
	watchCfg, err := cred.RESTConfig()
	if err != nil {
		return nil, err
	}
	watchCfg.QPS, watchCfg.Burst = 50, 100
	cfg := rest.CopyConfig(watchCfg)
	cfg.Timeout = c.Timeout
	// Two HTTP transports (planeTransport: the streams' and the reads') and one
	// RESTMapper per plane; the mapper discovers only the group-versions the operator
	// uses (planeMapper).
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	streams, reads := planeTransport(tlsConfig, 0), planeTransport(tlsConfig, readsIdleTimeout)
	httpClient, err := httpClientFor(cfg, reads)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	canaryCfg := rest.CopyConfig(cfg)
	canaryCfg.Impersonate = rest.ImpersonationConfig{UserName: posture.CanaryUser, Groups: []string{"system:masters"}}
	canaryHTTP, err := httpClientFor(canaryCfg, reads)
	if err != nil {
		return nil, err
	}
	watchHTTP, err := httpClientFor(watchCfg, streams)
	if err != nil {
		return nil, err
	}
	probeCfg := rest.CopyConfig(cfg)
	probeCfg.NegotiatedSerializer = metascheme.Codecs.WithoutConversion()
	probe, err := rest.UnversionedRESTClientForConfigAndClient(probeCfg, &http.Client{Transport: watchHTTP.Transport, Timeout: cfg.Timeout})
	if err != nil {
		return nil, err
	}
	// The transports hold the credential, parsed; the configurations kept to build
	// clients on them need none of it (every client is built with one of the HTTP
	// clients above), so they keep no copy of the key and certificates: about 4 KB a
	// plane, and one place fewer for the key to sit in memory. A client built from them
	// without those HTTP clients would not verify the plane's server, and so fail.
	for _, c := range []*rest.Config{watchCfg, cfg, canaryCfg} {
		c.TLSClientConfig = rest.TLSClientConfig{}
	}
	e := &entry{key: key, hash: cred.Hash, config: watchCfg, watchHTTP: watchHTTP,
		clientConfig: cfg, canaryConfig: canaryCfg, clientHTTP: httpClient, canaryHTTP: canaryHTTP,
		mapper: newPlaneMapper(disco), probeClient: probe, identity: cred.Identity, disco: disco}
	// A credential the clients cannot be built from fails here, not in every caller.
	p, err := c.connect(e)
	if err != nil {
		return nil, err
	}
	if _, err := p.Canary(); err != nil {
		return nil, err
	}
	return e, nil
}

// httpClientFor is rest.HTTPClientFor over a given transport: cfg's credentials,
// impersonation and user agent wrap it, and cfg.Timeout bounds each request.
func httpClientFor(cfg *rest.Config, transport http.RoundTripper) (*http.Client, error) {
	rt, err := rest.HTTPWrappersForConfig(cfg, transport)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: rt, Timeout: cfg.Timeout}, nil
}
