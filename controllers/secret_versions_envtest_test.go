package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/internal/devenv"
)

// TestSecretsReadOncePerVersion: a Ready plane's passes read the admin kubeconfig and the
// applier Secret from the management apiserver once per version, not once per pass (the
// namespace's metadata watch says whether the version changed), and a new version is read
// at once: Kamaji renewing the admin kubeconfig wakes the plane, which reads it and stays
// Ready; the applier Secret edited by someone else is read and found changed.
func TestSecretsReadOncePerVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("versions-"+rand.String(6)))
	key := client.ObjectKeyFromObject(p)
	admin := client.ObjectKey{Namespace: infraOf(p), Name: devenv.AdminKubeconfigSecretName(p.Name)}
	applier := applierSecretKey(p)

	// At rest, passes every RequeueInterval (2 s here): a window of five of them reads
	// neither Secret. (Right after Ready the plane's own last writes may still wake
	// passes that read once: look again until a window is quiet.)
	window := 10 * time.Second
	eventually(t, settle, func() error {
		t0 := time.Now()
		time.Sleep(window)
		if n := secretGets(t, admin, applier, t0, time.Now()); n > 0 {
			return fmt.Errorf("%d reads of the plane's Secrets in %s at rest, want 0", n, window)
		}
		return nil
	})

	// Kamaji renews the admin kubeconfig: a new version, read at once, the plane Ready.
	t0 := time.Now()
	secret := &corev1.Secret{}
	if err := k8s.Get(ctx, admin, secret); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(secret.DeepCopy())
	metav1.SetMetaDataAnnotation(&secret.ObjectMeta, "kamaji.clastix.io/renewed", time.Now().Format(time.RFC3339Nano))
	if err := k8s.Patch(ctx, secret, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, func() error {
		if n := secretGets(t, admin, client.ObjectKey{}, t0, time.Now()); n == 0 {
			return fmt.Errorf("the renewed admin kubeconfig was not read")
		}
		return nil
	})
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))

	// Someone rewrites the applier Secret's kubeconfig: read at once, found changed, and
	// the operator writes its own back.
	live := &corev1.Secret{}
	if err := k8s.Get(ctx, applier, live); err != nil {
		t.Fatal(err)
	}
	patch = client.MergeFrom(live.DeepCopy())
	live.Data[cpv1.ApplierKubeconfigKey] = []byte("apiVersion: v1\nkind: Config\n")
	if err := k8s.Patch(ctx, live, patch); err != nil {
		t.Fatal(err)
	}
	edited := live.ResourceVersion
	eventually(t, settle, func() error {
		if err := k8s.Get(ctx, applier, live); err != nil {
			return err
		}
		if live.ResourceVersion == edited || string(live.Data[cpv1.ApplierKubeconfigKey]) == "apiVersion: v1\nkind: Config\n" {
			return fmt.Errorf("the edited applier Secret is still as edited")
		}
		return nil
	})
}

// secretGets counts the operator's reads of Secrets a and b on the management apiserver
// between t0 and t1.
func secretGets(t *testing.T, a, b client.ObjectKey, t0, t1 time.Time) int {
	t.Helper()
	events, err := devenv.ReadAudit(mgmt.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if e.User.Username != devenv.OperatorUser || e.Verb != "get" || e.ObjectRef == nil || e.ObjectRef.Resource != "secrets" ||
			e.RequestReceived.Before(t0) || e.RequestReceived.After(t1) {
			continue
		}
		if k := (client.ObjectKey{Namespace: e.ObjectRef.Namespace, Name: e.ObjectRef.Name}); k == a || k == b {
			n++
		}
	}
	return n
}
