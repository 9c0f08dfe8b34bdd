// Package remote holds everything that talks to a ComputePlane's own API server: the
// per-plane client cache with health probing, hardening, identities and drift
// detection. It never talks to the management cluster on a plane's behalf.
package remote
