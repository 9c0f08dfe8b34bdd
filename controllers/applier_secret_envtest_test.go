package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// TestAttackTenantRewritesTheApplierSecret: the applier kubeconfig Secret lives in the
// tenant namespace and Flux applies with whatever it holds. A tenant who may write
// Secrets there points it at the management API server instead of the plane (with the
// plane's token it is refused at admission; with another credential it is stored); the
// operator finds the content is not what it wrote, reports the drift (the gate closes,
// which revokes the applier's tokens) and writes a new credential for the plane.
func TestAttackTenantRewritesTheApplierSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("applier-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	eventually(t, settle, conditionIs(ctx, key, cpv1.IdentitiesCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	mallory := tenantWithSecretRights(t, ctx, p.Namespace, "mallory")

	secret := &corev1.Secret{}
	if err := mallory.Get(ctx, applierSecretKey(p), secret); err != nil {
		t.Fatal(err)
	}
	planeServer := kubeconfigServer(t, secret.Data["value"])
	settled := &cpv1.ComputePlane{}
	if err := k8s.Get(ctx, key, settled); err != nil {
		t.Fatal(err)
	}
	identitiesBefore := apimeta.FindStatusCondition(settled.Status.Conditions, cpv1.IdentitiesCondition).LastTransitionTime
	time.Sleep(time.Second) // transition times have a one-second resolution

	// Same token and annotations, only the server and CA changed: refused at admission,
	// as every Secret a tenant writes holding a plane's token is.
	cfg, err := clientcmd.Load(secret.Data["value"])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server, c.CertificateAuthorityData = mgmt.Config.Host, mgmt.Config.CAData
	}
	if secret.Data["value"], err = clientcmd.Write(*cfg); err != nil {
		t.Fatal(err)
	}
	denied(t, mallory.Update(ctx, secret), "carries a ComputePlane's credential")
	// Another credential for the management API, the annotations kept: the expiry
	// annotation alone says nothing is due; the content is not what the operator wrote.
	for _, u := range cfg.AuthInfos {
		u.Token = "mallory-" + rand.String(20)
	}
	if secret.Data["value"], err = clientcmd.Write(*cfg); err != nil {
		t.Fatal(err)
	}
	if err := mallory.Update(ctx, secret); err != nil {
		t.Fatalf("the tenant could not edit the applier Secret: %v", err)
	}

	eventually(t, settle, func() error {
		restored := &corev1.Secret{}
		if err := k8s.Get(ctx, applierSecretKey(p), restored); err != nil {
			return err
		}
		if got := kubeconfigServer(t, restored.Data["value"]); got != planeServer {
			return fmt.Errorf("the applier kubeconfig points at %s, want the plane's %s", got, planeServer)
		}
		if !metav1.IsControlledBy(restored, p) {
			return errors.New("the restored Secret is not the plane's")
		}
		return nil
	})
	// Reported: Identities went False (Drifted) and came back.
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.IdentitiesCondition)
		if c.Status != metav1.ConditionTrue || !c.LastTransitionTime.After(identitiesBefore.Time) {
			return fmt.Errorf("%s = %s since %s, want True again after the drift at %s", cpv1.IdentitiesCondition, c.Status, c.LastTransitionTime, identitiesBefore)
		}
		return nil
	})
	restored := &corev1.Secret{}
	if err := k8s.Get(ctx, applierSecretKey(p), restored); err != nil {
		t.Fatal(err)
	}
	checkApplier(t, ctx, restored, p.Namespace)
}

// tenantWithSecretRights is a tenant user who may also write Secrets in its namespace.
// The operator's tenant roles grant no Secret rights, but a tenant in a real cluster
// usually holds the built-in edit role, which does: its Secret rights come from
// system:aggregate-to-edit, bound here directly (envtest runs no aggregation
// controller to fill edit itself).
func tenantWithSecretRights(t *testing.T, ctx context.Context, namespace, user string) client.Client {
	t.Helper()
	c := boundUser(t, ctx, namespace, user, clusterRoles("system:aggregate-to-edit"),
		func(c client.Client) error { return c.List(ctx, &corev1.SecretList{}, client.InNamespace(namespace)) })
	tenantUser(t, ctx, namespace, user)
	return c
}

// kubeconfigServer is the server of a kubeconfig's current context.
func kubeconfigServer(t *testing.T, kubeconfig []byte) string {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster, ok := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	if !ok {
		t.Fatalf("kubeconfig without its current context's cluster")
	}
	return cluster.Server
}
