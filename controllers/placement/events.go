package placement

import (
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"k8s.io/apimachinery/pkg/types"
)

// tell emits an event on a release once per state.
func (r *Reconciler) tell(hr *helmv2.HelmRelease, eventType, reason, format string, args ...any) {
	state := reason + ": " + fmt.Sprintf(format, args...)
	if r.remember(hr, state) {
		r.Events.Eventf(hr, nil, eventType, reason, "Placement", format, args...)
	}
}

// routed records that a release is routed, without an event: opening the gate is the
// credential alone (Flux's own events tell of the install), and a release held again
// later is told so again.
func (r *Reconciler) routed(hr *helmv2.HelmRelease) { r.remember(hr, RoutedReason) }

// remember records a release's state and reports whether it is new.
func (r *Reconciler) remember(hr *helmv2.HelmRelease, state string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.told == nil {
		r.told = map[types.UID]told{}
	}
	t := r.told[hr.UID]
	if t.state == state {
		return false
	}
	t.namespace, t.state = hr.Namespace, state
	r.told[hr.UID] = t
	return true
}

// forget drops what was told to the namespace's releases that are gone.
func (r *Reconciler) forget(namespace string, seen map[types.UID]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, t := range r.told {
		if t.namespace == namespace && !seen[uid] {
			delete(r.told, uid)
		}
	}
}
