package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestDeletedPlaneLeavesNothingBehind: a plane that put something in the reconciler's
// memos (a connection, its planeState with verified stages, its parsed admin credential,
// its applier Secret's digest, a grant policy; own status writes and teardown progress
// come and go on their own) leaves nothing of itself in any of them once it is gone.
func TestDeletedPlaneLeavesNothingBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("memory-"+rand.String(6)), withService("postgres", 5432))
	key := client.ObjectKeyFromObject(p)
	if err := k8s.Create(ctx, service(p.Namespace, "postgres", "plane", map[string]string{"app": "postgres"}, 5432)); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, grantsAre(ctx, p, "postgres"))
	want := []string{"plane connection", "plane state", "verified stages, drift series, grants hash", "admin credential", "applier digest"}
	eventually(t, settle, func() error {
		got := reconciler.Remembers(key)
		for _, w := range want {
			if !slices.Contains(got, w) {
				return fmt.Errorf("a Ready plane with a grant is remembered in %v, not yet in %s", got, w)
			}
		}
		return nil
	})

	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, planeGone(ctx, key))
	eventually(t, settle, func() error {
		if got := reconciler.Remembers(key); len(got) > 0 {
			return fmt.Errorf("the deleted plane is still remembered in %v", got)
		}
		return nil
	})
}
