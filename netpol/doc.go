// Package netpol generates the CiliumNetworkPolicies of a ComputePlane from its grants.
// It is pure: no I/O, so every policy it produces is covered by table and golden tests.
package netpol
