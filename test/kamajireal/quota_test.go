package kamajireal_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/remote"
	"github.com/cozystack/computeplane/test/testkit"
)

// checkDeployerCannotFillTheDataStore is the attack of a tenant's chart on the DataStore
// its plane shares with the class's other planes: the deployer writes ConfigMaps into a
// placement namespace, as many as it can. The class names no object counts; the
// operator's default quota must stop it, by the quota's own refusal (the plane's real
// kube-controller-manager computes the usage the apiserver's quota admission checks).
func checkDeployerCannotFillTheDataStore(t *testing.T, ctx context.Context, kubeconfig []byte, tcp *kamajiv1alpha1.TenantControlPlane, p *cpv1.ComputePlane) {
	t.Helper()
	admin := planeClient(t, kubeconfig, tcp)
	// The plane is Ready, so hardened: a quota it has is there; without one, the attack
	// below shows what that means.
	quota := client.ObjectKey{Namespace: "notebooks", Name: "computeplane"}
	if err := admin.Get(ctx, quota, &corev1.ResourceQuota{}); apierrors.IsNotFound(err) {
		t.Errorf("the placement namespace has no quota")
	}
	testkit.Poll(t, time.Minute, 100*time.Millisecond, func() error {
		q := &corev1.ResourceQuota{}
		if err := admin.Get(ctx, quota, q); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		if _, ok := q.Status.Used["count/configmaps"]; !ok {
			return fmt.Errorf("the placement namespace's quota counts no ConfigMaps yet: hard %v, used %v", q.Status.Hard, q.Status.Used)
		}
		return nil
	})
	deployer := planeClientAs(t, kubeconfig, tcp, "system:serviceaccount:"+p.Namespace+":"+cpv1.DeployerName)
	const tries = 300
	payload := strings.Repeat("x", 64<<10)
	for i := 0; i < tries; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", Name: fmt.Sprintf("fill-%d", i)}, Data: map[string]string{"x": payload}}
		err := deployer.Create(ctx, cm)
		if err == nil {
			continue
		}
		if !strings.Contains(err.Error(), "exceeded quota: computeplane") || !strings.Contains(err.Error(), "count/configmaps") {
			t.Fatalf("ConfigMap %d refused for another reason than the placement quota: %v", i, err)
		}
		t.Logf("the deployer's ConfigMap %d was refused by the placement namespace's quota: %v", i, err)
		return
	}
	t.Errorf("the deployer wrote %d ConfigMaps of 64 KiB into a placement namespace: nothing bounds what one plane writes into its shared DataStore", tries)
}

// planeClientAs is the plane's administrator, from the kubeconfig Kamaji wrote, through
// the proxy, impersonating user (none when empty).
func planeClientAs(t *testing.T, kubeconfig []byte, tcp *kamajiv1alpha1.TenantControlPlane, user string) client.Client {
	t.Helper()
	cred, err := remote.ParseAdminKubeconfig(kubeconfig, []string{fmt.Sprintf("https://%s.%s.svc:6443", tcp.Name, tcp.Namespace)})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := cred.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
