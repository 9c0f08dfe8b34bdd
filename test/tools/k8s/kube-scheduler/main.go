// Command kube-scheduler is the upstream kube-scheduler at the same version as the test
// apiserver, for planes that run real nodes.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
