// Command kube-controller-manager is the upstream kube-controller-manager at the same
// version as the test apiserver. The test bed runs it next to a plane's kube-apiserver
// (the pod runner, internal/devenv/podrunner.go) so that the plane gets what a real
// control plane's controllers make: each namespace's default ServiceAccount and
// kube-root-ca.crt, garbage collection, namespace deletion.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones, as upstream's main imports it

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"

	_ "github.com/cozystack/computeplane/test/tools/k8s/internal/parentdeath"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
