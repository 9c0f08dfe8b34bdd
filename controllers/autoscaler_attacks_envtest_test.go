package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
	"github.com/cozystack/computeplane/remote/posture"
)

// TestAttackOperatorRunsNoWorkloadOutsideInfrastructure: whoever holds the operator's
// identity on the management cluster (a stolen token, a bug) cannot create a Deployment
// or a ServiceAccount outside a plane's infrastructure namespace. A Deployment creator
// can run any pod as any ServiceAccount of its namespace: that right anywhere would be
// nearly cluster-admin. The operator takes it one infrastructure namespace at a time.
func TestAttackOperatorRunsNoWorkloadOutsideInfrastructure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op := asOperator(t)
	for _, ns := range []string{tenantNamespace(t, ctx), "default", "kube-system"} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "evil-" + rand.String(6)}}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "evil-" + rand.String(6)},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "evil"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "evil"}},
					Spec: corev1.PodSpec{ServiceAccountName: "default",
						Containers: []corev1.Container{{Name: "c", Image: "registry.example/evil"}}},
				},
			}}
		for what, err := range map[string]error{
			"create a ServiceAccount": op.Create(ctx, sa),
			"create a Deployment":     op.Create(ctx, d),
			"list Deployments":        op.List(ctx, &appsv1.DeploymentList{}, client.InNamespace(ns)),
		} {
			if !apierrors.IsForbidden(err) {
				t.Errorf("the operator's identity could %s in %s (err=%v)", what, ns, err)
			}
		}
	}
}

// autoscalerKubeconfig is the kubeconfig the plane's cluster-autoscaler Deployment
// mounts (whatever Secret and key its volume names), read with the suite's admin rights.
func autoscalerKubeconfig(t *testing.T, ctx context.Context, p *cpv1.ComputePlane) []byte {
	t.Helper()
	d := &appsv1.Deployment{}
	eventually(t, settle, func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: infraOf(p), Name: render.AutoscalerName(p)}, d)
	})
	var out []byte
	eventually(t, settle, func() error {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Secret == nil {
				continue
			}
			secret := &corev1.Secret{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: v.Secret.SecretName}, secret); err != nil {
				return err
			}
			for _, item := range v.Secret.Items {
				if item.Path == "kubeconfig" {
					out = secret.Data[item.Key]
					return nil
				}
			}
		}
		return fmt.Errorf("the autoscaler's Deployment mounts no kubeconfig: %+v", d.Spec.Template.Spec.Volumes)
	})
	return out
}

// TestAttackAutoscalerHoldsNoPlaneAdmin: the kubeconfig the plane's cluster-autoscaler
// runs with (it lives on the management cluster, where a platform operator with rights
// in the infrastructure namespace, or a compromised autoscaler, can read it) reaches
// the plane with the autoscaler's own rights only: it reads no Secret, grants nothing,
// creates no pod, and cannot widen its own role. What the autoscaler needs works: it
// lists pods and nodes, taints a node, evicts a pod, and keeps its lease and status
// ConfigMap in its namespace.
func TestAttackAutoscalerHoldsNoPlaneAdmin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, tenant := readyPlane(t, ctx, newClass("ca-attack-"+rand.String(6)), withGroup("workers", medium))
	cfg, err := clientcmd.RESTConfigFromKubeConfig(autoscalerKubeconfig(t, ctx, p))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	tc := tenant.Client

	// Something to read, to grant and to evict, made by the plane's admin.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "db-password"},
		StringData: map[string]string{"password": "hunter2"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-" + rand.String(6)}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "victim-" + rand.String(6)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app"}}}}
	for _, o := range []client.Object{secret, node, pod} {
		if err := tc.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "evil-" + rand.String(6)},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}}}
	ownRole := &rbacv1.ClusterRole{}
	_ = tc.Get(ctx, client.ObjectKey{Name: "computeplane-cluster-autoscaler"}, ownRole)
	ownRole.Rules = append(ownRole.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
	evilPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "evil-" + rand.String(6)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/evil"}}}}
	impersonated := rest.CopyConfig(cfg)
	impersonated.Impersonate = rest.ImpersonationConfig{UserName: "kubernetes-admin", Groups: []string{"system:masters"}}
	asAdmin, err := client.New(impersonated, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"read a Secret":                    ca.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}),
		"list Secrets":                     ca.List(ctx, &corev1.SecretList{}),
		"create a ClusterRoleBinding":      ca.Create(ctx, binding),
		"widen its own ClusterRole":        ca.Update(ctx, ownRole),
		"create a pod":                     ca.Create(ctx, evilPod),
		"delete a node":                    ca.Delete(ctx, node.DeepCopy()),
		"exec into a pod":                  ca.SubResource("exec").Create(ctx, pod.DeepCopy(), &corev1.Pod{}),
		"request a ServiceAccount's token": ca.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "default"}}, &authenticationv1.TokenRequest{}),
		"impersonate the plane's admins":   asAdmin.List(ctx, &corev1.SecretList{}),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the autoscaler's plane credential could %s (err=%v)", what, err)
		}
	}

	// What it needs.
	live := &corev1.Node{}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "computeplane-system", Name: "cluster-autoscaler"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ca-0")}}
	status := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "computeplane-system", Name: "cluster-autoscaler-status"},
		Data: map[string]string{"status": "ok"}}
	for what, err := range map[string]error{
		"list pods":  ca.List(ctx, &corev1.PodList{}),
		"list nodes": ca.List(ctx, &corev1.NodeList{}),
		"taint a node": func() error {
			if err := ca.Get(ctx, client.ObjectKeyFromObject(node), live); err != nil {
				return err
			}
			live.Spec.Taints = append(live.Spec.Taints, corev1.Taint{Key: "DeletionCandidateOfClusterAutoscaler", Effect: corev1.TaintEffectPreferNoSchedule})
			if err := ca.Update(ctx, live); err != nil {
				return err
			}
			return nil
		}(),
		"evict a pod": ca.SubResource("eviction").Create(ctx, pod.DeepCopy(), &policyv1.Eviction{}),
		"take its leader lease": func() error {
			if err := ca.Create(ctx, lease); err != nil {
				return err
			}
			lease.Spec.HolderIdentity = ptr.To("ca-1")
			return ca.Update(ctx, lease)
		}(),
		"write its status ConfigMap": func() error {
			if err := ca.Create(ctx, status); err != nil {
				return err
			}
			status.Data["status"] = "scaled"
			return ca.Update(ctx, status)
		}(),
	} {
		if err != nil {
			t.Errorf("the autoscaler could not %s: %v", what, err)
		}
	}
}

// TestAutoscalerCredentialLifecycle: the cluster-autoscaler's plane kubeconfig is a
// bounded token of its own ServiceAccount, in an operator-made Secret of the
// infrastructure namespace; a recreated ServiceAccount (every earlier token dead) gets
// a new token at once; when no group autoscales any more, and at teardown, the
// identity leaves the plane (the last token stops working) and the Secret goes.
func TestAutoscalerCredentialLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, tenant := readyPlane(t, ctx, newClass("ca-cred-"+rand.String(6)), withGroup("workers", medium))
	key := client.ObjectKeyFromObject(p)
	secretKey := client.ObjectKey{Namespace: infraOf(p), Name: render.AutoscalerKubeconfigSecretName(p)}
	saKey := client.ObjectKey{Namespace: posture.AutoscalerNamespace, Name: posture.AutoscalerName}
	tc := tenant.Client

	issued := func() (*corev1.Secret, client.Client) {
		t.Helper()
		secret := &corev1.Secret{}
		if err := k8s.Get(ctx, secretKey, secret); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[render.AutoscalerKubeconfigKey])
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return secret, c
	}
	autoscalerKubeconfig(t, ctx, p) // the Deployment mounts it
	secret, ca := issued()
	sa := &corev1.ServiceAccount{}
	if err := tc.Get(ctx, saKey, sa); err != nil {
		t.Fatal(err)
	}
	expires, err := time.Parse(time.RFC3339, secret.Annotations[cpv1.TokenExpiresAtAnnotation])
	if err != nil || time.Until(expires) > reconciler.TokenLifetime || secret.Annotations[cpv1.TokenServiceAccountUIDAnnotation] != string(sa.UID) {
		t.Errorf("token expires at %v (err=%v, lifetime %s), bound to %q, want the ServiceAccount's %s",
			expires, err, reconciler.TokenLifetime, secret.Annotations[cpv1.TokenServiceAccountUIDAnnotation], sa.UID)
	}
	if secret.Labels[cpv1.PlaneUIDLabel] != string(p.UID) || len(secret.OwnerReferences) != 0 {
		t.Errorf("Secret labels %v, owners %v", secret.Labels, secret.OwnerReferences)
	}
	if err := ca.List(ctx, &corev1.PodList{}); err != nil {
		t.Fatalf("the issued kubeconfig does not work: %v", err)
	}

	// The identity is the operator's: the plane's policies refuse a plane admin (and any
	// tenant) changing it. Deleted with the operator's own credential, every token of it
	// is dead, and the next full read (a reconcile request forces one) puts it back and
	// issues a token of the new ServiceAccount.
	denied(t, tc.Delete(ctx, sa.DeepCopy()), ownedByOperator)
	if err := operatorClient(t, ctx, p).Delete(ctx, sa); err != nil {
		t.Fatal(err)
	}
	requestReconcile(t, ctx, p, "autoscaler-deleted")
	eventually(t, settle, func() error {
		now := &corev1.ServiceAccount{}
		if err := tc.Get(ctx, saKey, now); err != nil {
			return err
		}
		s := &corev1.Secret{}
		if err := k8s.Get(ctx, secretKey, s); err != nil {
			return err
		}
		if now.UID == sa.UID || s.Annotations[cpv1.TokenServiceAccountUIDAnnotation] != string(now.UID) {
			return fmt.Errorf("ServiceAccount %s, token bound to %s", now.UID, s.Annotations[cpv1.TokenServiceAccountUIDAnnotation])
		}
		return nil
	})
	// The apiserver may cache a token's authentication for a few seconds; the token
	// names the deleted ServiceAccount's UID, so it is refused once the cache lets go.
	eventually(t, settle, revoked(ctx, ca, apierrors.IsUnauthorized))
	_, ca = issued()
	eventually(t, settle, func() error { return ca.List(ctx, &corev1.PodList{}) })

	// No group autoscales: the identity leaves the plane, the Secret goes.
	setGroup(t, ctx, p, "workers", fixedSize)
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, secretKey, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Secret %s: err=%v", secretKey, err)
		}
		for _, o := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.ClusterRoleBinding{}, &rbacv1.ClusterRole{}} {
			k := saKey
			if _, ok := o.(*corev1.ServiceAccount); !ok {
				k = client.ObjectKey{Name: posture.AutoscalerName}
			}
			if err := tc.Get(ctx, k, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s in the plane: err=%v", o, k, err)
			}
		}
		return nil
	})
	// Its rights went first (the bindings), then its ServiceAccount.
	if err := revoked(ctx, ca, isRefused)(); err != nil {
		t.Errorf("after its group stopped autoscaling: %v", err)
	}

	// Autoscaled again, then torn down: the same at teardown.
	setGroup(t, ctx, p, "workers", medium)
	eventually(t, settle, func() error { return k8s.Get(ctx, secretKey, &corev1.Secret{}) })
	_, ca = issued()
	eventually(t, settle, func() error { return ca.List(ctx, &corev1.PodList{}) })
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, planeGone(ctx, key))
	if err := k8s.Get(ctx, secretKey, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the teardown, Secret %s: err=%v", secretKey, err)
	}
	if err := revoked(ctx, ca, isRefused)(); err != nil {
		t.Errorf("after the teardown: %v", err)
	}
}

// isRefused: the request was not authenticated, or not authorized.
func isRefused(err error) bool { return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) }

// revoked checks that a client of the autoscaler's credential is refused as refused
// says, for what it could do before.
func revoked(ctx context.Context, c client.Client, refused func(error) bool) func() error {
	return func() error {
		if err := c.List(ctx, &corev1.PodList{}); !refused(err) {
			return fmt.Errorf("the autoscaler's token still lists pods (err=%v)", err)
		}
		return nil
	}
}
