// Package remote holds everything about a ComputePlane's own API server: the per-plane
// connections (client cache, health probe, watches), and every write into a plane:
// hardening, identities, tokens, revocation, and the canaries that prove the policies in
// force.
//
// What the operator wants in a plane is remote/posture's, which is pure. The files named
// plane_*.go do the I/O: they take a client and talk to a plane's API server; admin.go
// and admin_credentials.go parse and vet its admin credential, with table tests and no
// API server. Applying and comparing is package ssa's, which both clusters share.
package remote

// FieldOwner is the server-side apply field manager of everything the operator writes
// into a plane.
const FieldOwner = "computeplane-hardening"
