// Package remote holds everything about a ComputePlane's own API server: the per-plane
// client cache with health probing, hardening, identities and drift pacing.
//
// The files named plane_*.go do I/O: they take a client and talk to a plane's API
// server. The others are pure: they build the objects the operator wants in a plane
// (posture.go with canaries.go, identities.go), parse and vet its admin credential
// (admin.go) and pace drift repairs (drift.go), with table tests and no API server.
// Applying and comparing is internal/ssa's, which both clusters share.
package remote
