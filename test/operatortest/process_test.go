package operatortest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/operatortest"
	"github.com/cozystack/computeplane/test/testkit"
)

// TestProcessIsTheShippedManager: the binary runs as the operator's ServiceAccount, takes
// the leader lease, serves its memory figures, and a SIGKILL leaves the lease held (what
// a successor must wait out), unlike a graceful stop.
func TestProcessIsTheShippedManager(t *testing.T) {
	ctx := context.Background()
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: controllers.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgmt.Stop() })

	p, err := operatortest.StartProcess(ctx, mgmt, operatortest.ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	rss, err := p.RSS()
	if err != nil || rss < 1<<20 {
		t.Fatalf("RSS = %d, %v", rss, err)
	}
	m, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if m["go_memstats_heap_inuse_bytes"] <= 0 {
		t.Fatalf("no heap figure among %d metrics", len(m))
	}

	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: devenv.OperatorNamespace, Name: controllers.LeaderElectionIDFor(nil)}
	testkit.Eventually(t, 30*time.Second, func() error {
		if err := mgmt.Client.Get(ctx, key, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("the lease is not held")
		}
		return nil
	})
	p.Kill()
	if err := mgmt.Client.Get(ctx, key, lease); err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatal("a killed manager released its lease: it was not killed")
	}
}
