package computeplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// The operator holds no cluster-wide right on Secrets. It reads a plane's admin
// kubeconfig in the plane's infrastructure namespace and writes the applier kubeconfig in
// its tenant namespace, and only there: on its first Secret request in such a namespace
// (refused) it binds the shipped ClusterRole SecretsRole there to itself, a right it holds
// as `bind` on that one role, and retries. The binding goes with the teardown. The
// cluster-autoscaler's Deployment and ServiceAccount are taken the same way
// (autoscalerRights, nodes_heal_scale.go).
//
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;create;update;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=computeplane-secrets

const (
	// SecretsRole is the ClusterRole config/rbac ships with the Secret rights the
	// operator takes, one namespace at a time.
	SecretsRole = "computeplane-secrets"
	// SecretsBinding names the RoleBinding that grants it in a namespace.
	SecretsBinding = "computeplane-secrets"
)

// namespacedRights are rights the operator holds in no namespace until it binds their
// shipped ClusterRole (Role) to itself in one, with a RoleBinding named Binding.
type namespacedRights struct {
	Role, Binding string
}

// secretRights are the operator's rights on Secrets.
var secretRights = namespacedRights{Role: SecretsRole, Binding: SecretsBinding}

// errNamespaceTerminating: the operator has no Secret rights in a namespace that is
// being deleted (its binding went first) and can no longer take them; the namespace's
// Secrets go with it.
var errNamespaceTerminating = errors.New("the namespace is being deleted")

// secretAccess knows who the operator is (for the bindings' subject).
type secretAccess struct {
	mu      sync.Mutex
	subject *rbacv1.Subject
}

// withRights runs op, a request in namespace that rights cover; when RBAC refuses it,
// it binds rights.Role to the operator there and runs op again once the binding is in
// force.
func (r *Reconciler) withRights(ctx context.Context, rights namespacedRights, namespace string, op func() error) error {
	err := op()
	if !apierrors.IsForbidden(err) {
		return err
	}
	if gerr := r.grantRights(ctx, rights, namespace); gerr != nil {
		if apierrors.HasStatusCause(gerr, corev1.NamespaceTerminatingCause) {
			return fmt.Errorf("%w: %w", errNamespaceTerminating, err)
		}
		return fmt.Errorf("%w (and binding %s in %s: %w)", err, rights.Role, namespace, gerr)
	}
	// The authorizer sees a new binding a moment later.
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		err = op()
		return !apierrors.IsForbidden(err), nil
	})
	return err
}

// withSecretAccess runs op, a request on Secrets in namespace, with the operator's
// Secret rights there.
func (r *Reconciler) withSecretAccess(ctx context.Context, namespace string, op func() error) error {
	return r.withRights(ctx, secretRights, namespace, op)
}

// secretsIn is the one way the operator reaches Secrets: every request goes through
// withSecretAccess for its namespace.
type secretsIn struct {
	r         *Reconciler
	ctx       context.Context
	namespace string
	// plane is the ComputePlane the Secrets are read for (a change wakes it).
	plane client.ObjectKey
	// fresh: read from the API server whatever the watch says (a person asked for a
	// reconcile).
	fresh bool
}

func (r *Reconciler) secretsIn(ctx context.Context, namespace string, s *scope) secretsIn {
	return secretsIn{r: r, ctx: ctx, namespace: namespace, plane: client.ObjectKeyFromObject(s.plane), fresh: s.freshSecrets}
}

// get reads the Secret as it was last read when the namespace's watch reports the same
// version (secret_versions.go), and from the API server otherwise.
func (c secretsIn) get(name string, secret *corev1.Secret) error {
	key := client.ObjectKey{Namespace: c.namespace, Name: name}
	if !c.fresh && c.r.secretVersions.recall(key, secret) {
		return nil
	}
	err := c.r.withSecretAccess(c.ctx, c.namespace, func() error {
		return c.r.APIReader.Get(c.ctx, key, secret)
	})
	if err == nil {
		c.r.secretVersions.remember(c.plane, secret)
	}
	return err
}

func (c secretsIn) create(secret *corev1.Secret) error {
	err := c.r.withSecretAccess(c.ctx, c.namespace, func() error { return c.r.Create(c.ctx, secret) })
	if err == nil {
		c.r.secretVersions.remember(c.plane, secret)
	}
	return err
}

func (c secretsIn) update(secret *corev1.Secret) error {
	err := c.r.withSecretAccess(c.ctx, c.namespace, func() error { return c.r.Update(c.ctx, secret) })
	if err == nil {
		c.r.secretVersions.remember(c.plane, secret)
	}
	return err
}

func (c secretsIn) delete(secret *corev1.Secret) error {
	c.r.secretVersions.drop(client.ObjectKeyFromObject(secret))
	return c.r.withSecretAccess(c.ctx, c.namespace, func() error { return client.IgnoreNotFound(c.r.Delete(c.ctx, secret)) })
}

// grantRights creates (or puts back) the operator's binding of rights in namespace.
// A RoleBinding of that name the operator did not create is never touched.
func (r *Reconciler) grantRights(ctx context.Context, rights namespacedRights, namespace string) error {
	subject, err := r.operatorSubject(ctx)
	if err != nil {
		return err
	}
	want := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: rights.Binding,
			Labels: map[string]string{cpv1.ManagedByLabel: cpv1.ManagedByValue}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rights.Role},
		Subjects: []rbacv1.Subject{*subject},
	}
	live := &rbacv1.RoleBinding{}
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), live); {
	case apierrors.IsNotFound(err):
		return r.Create(ctx, want)
	case err != nil:
		return err
	case live.Labels[cpv1.ManagedByLabel] != cpv1.ManagedByValue:
		return fmt.Errorf("RoleBinding %s/%s exists and was not created by the operator; the operator never overwrites it: delete or rename it", namespace, rights.Binding)
	case live.RoleRef != want.RoleRef: // immutable
		if err := r.Delete(ctx, live); client.IgnoreNotFound(err) != nil {
			return err
		}
		return r.Create(ctx, want)
	case !equality.Semantic.DeepEqual(live.Subjects, want.Subjects):
		live.Subjects = want.Subjects
		return r.Update(ctx, live)
	}
	return nil
}

// holdsRights reports whether the operator's binding of rights exists in namespace: the
// operator can have made nothing there that needs them without it.
func (r *Reconciler) holdsRights(ctx context.Context, rights namespacedRights, namespace string) (bool, error) {
	live := &rbacv1.RoleBinding{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: rights.Binding}, live); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return live.Labels[cpv1.ManagedByLabel] == cpv1.ManagedByValue, nil
}

// dropRights removes the operator's binding of rights from namespace, if it made one.
func (r *Reconciler) dropRights(ctx context.Context, rights namespacedRights, namespace string) error {
	live := &rbacv1.RoleBinding{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: rights.Binding}, live); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case live.Labels[cpv1.ManagedByLabel] != cpv1.ManagedByValue:
		return nil
	}
	return client.IgnoreNotFound(r.Delete(ctx, live))
}

// operatorSubject asks the apiserver who the operator is (a SelfSubjectReview), once.
func (r *Reconciler) operatorSubject(ctx context.Context) (*rbacv1.Subject, error) {
	r.secrets.mu.Lock()
	defer r.secrets.mu.Unlock()
	if r.secrets.subject != nil {
		return r.secrets.subject, nil
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := r.Create(ctx, review); err != nil {
		return nil, fmt.Errorf("asking the apiserver who the operator is: %w", err)
	}
	r.secrets.subject = subjectOf(review.Status.UserInfo.Username)
	return r.secrets.subject, nil
}

// subjectOf is the RBAC subject of a user name: a ServiceAccount's
// (system:serviceaccount:<namespace>:<name>), or a user's.
func subjectOf(username string) *rbacv1.Subject {
	if rest, ok := strings.CutPrefix(username, "system:serviceaccount:"); ok {
		if ns, name, ok := strings.Cut(rest, ":"); ok {
			return &rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
		}
	}
	return &rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: username}
}
