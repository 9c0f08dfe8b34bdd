// Package tenancy holds the rules the ComputePlane and placement controllers must agree
// on, so that neither imports the other: which plane serves a namespace, which classes
// admit a namespace, a plane's placement namespaces, where a Flux object may name a
// plane's credential, the shard a plane belongs to, and the indexes both read. It is
// pure: no client, no I/O; the controllers read the objects and ask it.
package tenancy
