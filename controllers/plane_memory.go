package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// forgetPlane drops everything this process remembers of a plane: its connection and
// watches (the plane cache), its planeState (verified stages, drift series, grants
// hash), its parsed admin credential, teardown progress, own status writes, the
// applier's and cluster-autoscaler's Secret digests, and the Secrets read for it with
// their watches. It is the one call for every path on which a plane leaves this manager
// (gone, torn down, or moved to another shard); a memo added to the reconciler is added
// here and to remembers, and
// TestDeletedPlaneLeavesNothingBehind checks both.
func (r *ComputePlaneReconciler) forgetPlane(key client.ObjectKey) {
	r.Planes.Remove(key)
	r.state.forget(key)
	r.credentials.Forget(key)
	r.recordTeardownProgress(key, -1)
	r.writes.forget(key)
	r.applierMem.forget(key)
	r.autoscalerMem.forget(key)
	r.secretVersions.forget(key)
}

// remembers names the memos that still hold something of the plane.
func (r *ComputePlaneReconciler) remembers(key client.ObjectKey) []string {
	var out []string
	add := func(name string, held bool) {
		if held {
			out = append(out, name)
		}
	}
	add("plane connection", r.Planes.Known(key))
	add("plane state (verified stages, drift series, grants hash)", r.state.remembers(key))
	add("admin credential", r.credentials.Remembers(key))
	r.progressMu.Lock()
	_, ok := r.progress[key]
	r.progressMu.Unlock()
	add("teardown progress", ok)
	add("own writes", r.writes.remembers(key))
	add("applier digest", r.applierMem.remembers(key))
	add("cluster-autoscaler kubeconfig digest", r.autoscalerMem.remembers(key))
	add("Secrets read and their watches", r.secretVersions.remembers(key))
	return out
}
