// Package capistandin stands in for the Cluster API components that cannot run on these
// machines, reduced to what a ComputePlane uses and written from their source, each
// function naming the upstream file it follows:
//
//   - Kamaji's Cluster API control-plane provider,
//     github.com/clastix/cluster-api-control-plane-provider-kamaji v0.20.0 (controllers/):
//     KamajiControlPlane → TenantControlPlane, the endpoint handed to the Cluster and the
//     KubevirtCluster, the kubeconfig and CA Secrets of Cluster API's contract, the
//     KamajiControlPlane's status. It cannot be built here: v0.20.0 requires a Kamaji
//     pseudo-version the module proxy refuses, and Kamaji v1.0.0 does not compile with it.
//   - Cluster API core's Cluster controller, sigs.k8s.io/cluster-api v1.14.2
//     (core/reconcilers/cluster): owner references on the referenced objects, the
//     infrastructure's and control plane's readiness and endpoint mirrored onto the Cluster,
//     and deletion of what the Cluster owns before its finalizer comes off.
//     With Options.RealCore, Cluster API's real core manager runs instead
//     (devenv.StartClusterAPI) and this stand-in does not.
//   - CAPK v0.1.10's machine controller, sigs.k8s.io/cluster-api-provider-kubevirt
//     (controllers/kubevirtmachine_controller.go), with Options.VMs: a KubevirtMachine's
//     VM is booted from its Machine's bootstrap data on a vm.Host, and its Node gets the
//     provider ID.
//   - The cluster-autoscaler's scale-up, kubernetes/autoscaler cluster-autoscaler
//     (cloudprovider/clusterapi, core/scaleup), with Options.Autoscaler: for each
//     autoscaler Deployment the operator renders, as its ServiceAccount and with the
//     plane kubeconfig its pod mounts, pending pods grow their group up to its max
//     (autoscaler.go, the plan pure in autoscaler_plan.go). The module proxy refuses
//     k8s.io/autoscaler/cluster-autoscaler.
//   - The garbage collector, for the objects the provider and the Cluster stand-in make
//     with owner references (envtest runs no kube-controller-manager).
//
// Real Kamaji (test/devenv.RealKamaji) does the rest: the TenantControlPlane's status, its
// certificates and kubeconfigs, and its control plane (run by the pod runner). Nothing here
// writes a TenantControlPlane's status or a Kamaji Secret. Without Options.VMs, no
// machine is stood in for: node groups' MachineDeployments are left as applied.
package capistandin
