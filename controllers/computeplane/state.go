package computeplane

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/remote"
)

// planeState is what the reconciler remembers of one plane between its passes, beside
// the connection (the plane cache's) and the Secrets read for it (secretVersions), which
// own watches: per stage, whether it was last read back as the operator left it, so a
// difference found later is drift even when the status in the informer cache lags
// behind its own writes; its drift series; the hash of the grant policy last applied;
// since when its written policies wait to be proven in force; its admin kubeconfig as
// last parsed; how far its teardown has come; its last status write, until the cache
// shows it; and the digests of its applier's and cluster-autoscaler's kubeconfig Secrets
// as last written or verified. One lock guards every plane's, and forgetPlane drops all
// of it at once.
type planeState struct {
	verified   map[string]bool
	drifts     driftSeries
	grantsHash string
	// unprovenSince is when a pass first found the posture written but not proven in
	// force (zero once proven).
	unprovenSince time.Time
	// credential is the plane's last admin kubeconfig that parsed, by digest (never its
	// key): adminCredential.
	credential remote.AdminCredentialMemo
	// teardownStage is the furthest teardown stage this process saw the plane wait on,
	// by index (tearingDown: one was recorded): teardownProgress.
	teardownStage int
	tearingDown   bool
	// write is the plane's last status write, until the cache shows it: cache_lag.go.
	write ownWrite
	// applier and autoscaler are the digests of the applier's and the
	// cluster-autoscaler's kubeconfig Secrets: credentialMemory.
	applier, autoscaler credentialSeen
}

// holdsStages reports whether the state holds verified stages, a drift series, a grants
// hash or a wait for proof.
func (s *planeState) holdsStages() bool {
	return len(s.verified) > 0 || s.drifts != (driftSeries{}) || s.grantsHash != "" || !s.unprovenSince.IsZero()
}

// planeStates holds every plane's state; forgetPlane drops one.
type planeStates struct {
	mu     sync.Mutex
	states map[client.ObjectKey]*planeState
}

// with runs f on the plane's state (made on first use) under the lock. Only writes use
// it: a read uses peek.
func (m *planeStates) with(key client.ObjectKey, f func(*planeState)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.states == nil {
		m.states = map[client.ObjectKey]*planeState{}
	}
	s := m.states[key]
	if s == nil {
		s = &planeState{verified: map[string]bool{}}
		m.states[key] = s
	}
	f(s)
}

// peek runs f on the plane's state if it has one (nil otherwise), under the lock: a read
// never makes state, so a read racing a forget cannot leave any behind.
func (m *planeStates) peek(key client.ObjectKey, f func(*planeState)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.states[key])
}

// forget drops all the plane's state.
func (m *planeStates) forget(key client.ObjectKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.states, key)
}

// setVerified records whether a stage of the plane is, as far as the operator knows, as
// it applied it: true after a successful read-back, false once drift was reported (so
// the next pass restores instead of reporting it again, and reads the plane in full).
func (r *Reconciler) setVerified(key client.ObjectKey, stage string, v bool) {
	r.state.with(key, func(s *planeState) { s.verified[stage] = v })
	if !v {
		r.Planes.Unsettle(key, remote.UnsettledNotVerified)
	}
}

// wasVerified reports what setVerified last recorded for the plane's stage, or, when
// nothing was recorded (the operator restarted), what the status says. What this
// process recorded wins: the status in the informer cache may lag behind its own
// writes, and a drift it just reported must not be reported again.
func (r *Reconciler) wasVerified(key client.ObjectKey, stage string, status bool) bool {
	out := status
	r.state.peek(key, func(s *planeState) {
		if s == nil {
			return
		}
		if v, ok := s.verified[stage]; ok {
			out = v
		}
	})
	return out
}

// driftDelay records a drift of the plane and returns how long to wait before repairing
// it, and how many drifts the plane had in a row.
func (r *Reconciler) driftDelay(key client.ObjectKey, now time.Time) (delay time.Duration, n int) {
	r.state.with(key, func(s *planeState) { delay, n = s.drifts.next(now) })
	return delay, n
}

// repairWait is how long the repair of the plane's last drift must still wait. Events
// the drift report itself causes (the revoked credential, the status) must not repair
// early, or the backoff would mean nothing.
func (r *Reconciler) repairWait(key client.ObjectKey, now time.Time) (wait time.Duration) {
	r.state.peek(key, func(s *planeState) {
		if s != nil {
			wait = s.drifts.wait(now)
		}
	})
	return wait
}

// unprovenFor records that the plane's policies are written and not yet proven in force
// (from now on, when restart: this pass wrote some), and says for how long that has been
// so.
func (r *Reconciler) unprovenFor(key client.ObjectKey, now time.Time, restart bool) time.Duration {
	var since time.Time
	r.state.with(key, func(s *planeState) {
		if restart || s.unprovenSince.IsZero() {
			s.unprovenSince = now
		}
		since = s.unprovenSince
	})
	return now.Sub(since)
}

// proven records that the plane's policies were seen in force.
func (r *Reconciler) proven(key client.ObjectKey) {
	r.state.peek(key, func(s *planeState) {
		if s != nil {
			s.unprovenSince = time.Time{}
		}
	})
}

// adminCredential is remote.ParseAdminKubeconfig(data, servers) for the plane's admin
// kubeconfig, without the parse when its state remembers the same data and servers
// (remote.AdminCredentialMemo). A refused kubeconfig is never remembered, and drops the
// credential remembered before it.
func (r *Reconciler) adminCredential(key client.ObjectKey, data []byte, servers []string) (*remote.AdminCredential, error) {
	var memo remote.AdminCredentialMemo
	r.state.peek(key, func(s *planeState) {
		if s != nil {
			memo = s.credential
		}
	})
	cred, next, err := memo.Parse(data, servers)
	switch {
	case next == memo:
		// Remembered (or refused with nothing remembered): nothing to write.
	case err != nil:
		// Drop what a forget may already have dropped, never making state for it.
		r.state.peek(key, func(s *planeState) {
			if s != nil {
				s.credential = remote.AdminCredentialMemo{}
			}
		})
	default:
		r.state.with(key, func(s *planeState) { s.credential = next })
	}
	return cred, err
}
