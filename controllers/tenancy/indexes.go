package tenancy

import cpv1 "github.com/cozystack/computeplane/api/v1alpha1"

// The field indexes of ComputePlanes in the manager's cache, which both controllers list
// by.
const (
	// ClassNameField indexes planes by spec.className: a class change wakes its planes
	// (and their namespaces' placement releases).
	ClassNameField = ".spec.className"
	// InfrastructureNamespaceField indexes planes by status.infrastructureNamespace: an
	// object a provider made there wakes the plane whose namespace it is.
	InfrastructureNamespaceField = ".status.infrastructureNamespace"
)

// Index is a field index of the manager's cache of ComputePlanes.
type Index struct {
	Field   string
	Extract func(*cpv1.ComputePlane) []string
}

// Indexes are every index the controllers read: the manager registers them all, once,
// before any controller starts.
func Indexes() []Index {
	return []Index{
		{ClassNameField, func(p *cpv1.ComputePlane) []string { return []string{p.Spec.ClassName} }},
		{InfrastructureNamespaceField, func(p *cpv1.ComputePlane) []string { return []string{p.Status.InfrastructureNamespace} }},
	}
}
