// Command kube-apiserver is the upstream kube-apiserver, built from the Go module proxy so
// that tests and the demo run against a real API server without Docker or downloads.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"

	_ "github.com/cozystack/computeplane/test/tools/k8s/internal/parentdeath"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
