// Command kube-scheduler is the upstream kube-scheduler at the same version as the test
// apiserver, for planes that run real nodes.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "github.com/cozystack/computeplane/test/tools/k8s/internal/parentdeath"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
