package controllers

import (
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// NewScheme returns a scheme with every API the operator reads or writes: Kubernetes,
// ComputePlane, Cluster API, Kamaji, KubeVirt, Cilium and Flux, each through its own
// upstream types.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		cpv1.AddToScheme,
		clusterv1.AddToScheme,
		bootstrapv1.AddToScheme,
		kamajiv1alpha1.AddToScheme,
		kubevirtv1.AddToScheme,
		ciliumv2.AddToScheme,
		helmv2.AddToScheme,
		sourcev1.AddToScheme,
	} {
		utilruntime.Must(add(s))
	}
	return s
}
