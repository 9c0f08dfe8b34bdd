// Package testkit holds the helpers the test suites and benchmarks share: waiting
// (Eventually, Poll), fixtures and checks of planes (NewTenantPlane, ReadyIs, GateClosed,
// ApplierRevoked, HoldCluster, CheckNothingLeft) and benchmark figures (Means, Quantile).
// They import "testing", so they live outside the shipped tree: nothing under cmd/ may
// import this package. The environments they run against are internal/devenv's.
package testkit
