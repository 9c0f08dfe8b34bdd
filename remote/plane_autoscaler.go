package remote

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/remote/posture"
)

// RevokeAutoscaler removes the autoscaler's identity from the plane (those of its
// objects that carry labels): the bindings first, so its rights go at once, then the
// roles, then the ServiceAccount, so every token issued for it stops working. The
// ServiceAccount goes last so that its absence, one read, says nothing is left.
func RevokeAutoscaler(ctx context.Context, c client.Client, labels map[string]string) ([]string, error) {
	sa := &corev1.ServiceAccount{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: posture.AutoscalerNamespace, Name: posture.AutoscalerName}, sa); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return DeleteOwned(ctx, c, autoscalerRevocationOrder(posture.AutoscalerIdentity(nil)), labels)
}

// autoscalerRevocationOrder puts the identity's objects in the order RevokeAutoscaler
// deletes them: bindings, roles, the ServiceAccount.
func autoscalerRevocationOrder(objs []client.Object) []client.Object {
	rank := func(o client.Object) int {
		switch o.(type) {
		case *rbacv1.ClusterRoleBinding, *rbacv1.RoleBinding:
			return 0
		case *rbacv1.ClusterRole, *rbacv1.Role:
			return 1
		}
		return 2
	}
	out := make([]client.Object, 0, len(objs))
	for r := 0; r <= 2; r++ {
		for _, o := range objs {
			if rank(o) == r {
				out = append(out, o)
			}
		}
	}
	return out
}
