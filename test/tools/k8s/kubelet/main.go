// Command kubelet is the upstream kubelet at the same version as the test apiserver: the
// kubelet of the test bed's worker nodes (internal/devenv/vm).
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"

	_ "github.com/cozystack/computeplane/test/tools/k8s/internal/parentdeath"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
