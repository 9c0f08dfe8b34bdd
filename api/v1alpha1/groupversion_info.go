// Package v1alpha1 holds the ComputePlane API: the cluster-scoped, operator-owned
// ComputePlaneClass (the security and sizing profile) and the namespaced ComputePlane a
// tenant creates to get one isolated cluster.
//
// +kubebuilder:object:generate=true
// +groupName=computeplane.cozystack.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "computeplane.cozystack.io", Version: "v1alpha1"}

	// SchemeBuilder registers this package's kinds with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
