package devenv

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cozystack/computeplane/internal/devenv/cilium"
)

// ErrNoCilium says the cilium-agent is not built.
var ErrNoCilium = errors.New("the cilium-agent is not built: run test/tools/cilium.sh (`make test` does), or set CILIUM_BIN to its output")

// CiliumBinaries is the directory holding cilium-agent, cilium-cni and lib/bpf:
// $CILIUM_BIN, or test/tools/cilium.sh's cache (never building).
func CiliumBinaries() (string, error) {
	return builtTool("CILIUM_BIN", "cilium.sh", ErrNoCilium)
}

// StartCiliumNode starts the management node (cilium.Start) of a management cluster
// started with ManagementOptions.Cilium: the agent as an administrator, reaching the
// apiserver at the address it advertises.
func StartCiliumNode(ctx context.Context, mgmt *Cluster, bin, dir string) (*cilium.Node, error) {
	user, err := mgmt.Env.AddUser(envtest.User{Name: "cilium-agent", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(mgmt.Config.Host)
	if err != nil {
		return nil, err
	}
	return cilium.Start(ctx, cilium.Options{
		Dir: dir, Binaries: bin, KubeBinaries: os.Getenv("KUBEBUILDER_ASSETS"), Client: mgmt.Client, Kubeconfig: kubeconfig,
		APIServer: net.JoinHostPort(cilium.HostIP, u.Port()), ServerName: "localhost",
	})
}
