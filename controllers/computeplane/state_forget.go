package computeplane

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// forgetPlane drops everything this process remembers of a plane: its connection and
// watches (the plane cache), its planeState (verified stages, drift series, grants hash,
// parsed admin credential, teardown progress, own status write, the applier's and
// cluster-autoscaler's Secret digests), and the Secrets read for it with their watches.
// It is the one call for every path on which a plane leaves this manager (gone, torn
// down, or moved to another shard). Something new to remember of a plane is a field of
// planeState, named in remembers; only what owns goroutines (a connection, watches) is
// kept apart, and forgotten here. TestDeletedPlaneLeavesNothingBehind checks both.
func (r *Reconciler) forgetPlane(key client.ObjectKey) {
	r.Planes.Remove(key)
	r.state.forget(key)
	r.secretVersions.forget(key)
}

// Remembers names the memos that still hold something of the plane: "plane state" for
// its planeState at all (made by any write, dropped only by forgetPlane), and each part
// of it that holds something.
func (r *Reconciler) Remembers(key client.ObjectKey) []string {
	var out []string
	add := func(name string, held bool) {
		if held {
			out = append(out, name)
		}
	}
	add("plane connection", r.Planes.Known(key))
	r.state.peek(key, func(s *planeState) {
		if s == nil {
			return
		}
		add("plane state", true)
		add("verified stages, drift series, grants hash", s.holdsStages())
		add("admin credential", s.credential.Held())
		add("teardown progress", s.tearingDown)
		add("own writes", s.write.held)
		add("applier digest", s.applier.held)
		add("cluster-autoscaler kubeconfig digest", s.autoscaler.held)
	})
	add("Secrets read and their watches", r.secretVersions.remembers(key))
	return out
}
