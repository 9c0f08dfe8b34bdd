package controllers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// CacheOptions scope the manager's informers to what the controllers read, so the
// operator's memory follows its planes, not the size of the management cluster: of the
// cluster's Services only those that opted in to a grant are cached (the grant
// controller reads nothing else of them). Every manager running the controllers uses
// these.
func CacheOptions() cache.Options {
	optedIn, err := labels.NewRequirement(cpv1.ServiceAccessLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Service{}: {Label: labels.NewSelector().Add(*optedIn)},
	}}
}

// ClientOptions make the manager's client read the kinds the operator has no Go types
// for (KamajiControlPlane, KubevirtCluster, KubevirtMachineTemplate: unstructured) from
// its informers, as it reads the typed ones: a pass over a plane with nothing to change
// then asks the management API server for nothing but the credential Secrets, which
// are never cached.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{Unstructured: true}}
}
