// Command kubeadm is the upstream kubeadm at the same version as the test apiserver: the
// test bed's worker nodes join their plane with it, running the bootstrap data Cluster
// API's kubeadm bootstrap provider renders.
package main

import (
	"k8s.io/kubernetes/cmd/kubeadm/app"
	utilerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"

	_ "github.com/cozystack/computeplane/test/tools/k8s/internal/parentdeath"
)

func main() {
	utilerrors.HandleError(app.Run())
}
