package controllers_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAttackCredentialCopyUnderAnotherName: the tenant may read its plane's applier
// Secret (Flux reads it in the tenant namespace). Placement admission judges the Secret
// names Flux objects carry, so a copy under another name, named by an unlabelled
// HelmRelease or a Kustomization, would apply into the plane as the deployer, unheld,
// uncounted and never uninstalled; valuesFrom the copy would hand the token to a chart.
// Content is judged instead: no Secret but the operator's may hold a plane's token,
// whatever its key, quoting, escaping or encoding.
func TestAttackCredentialCopyUnderAnotherName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _ := readyPlane(t, ctx, newClass("copy-"+rand.String(6)))
	mallory := tenantWithSecretRights(t, ctx, p.Namespace, "mallory-"+rand.String(4))
	applier := &corev1.Secret{}
	if err := mallory.Get(ctx, applierSecretKey(p), applier); err != nil {
		t.Fatal(err)
	}
	kubeconfig := applier.Data["value"]
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var token string
	for _, u := range cfg.AuthInfos {
		token = u.Token
	}
	var escaped strings.Builder
	for _, r := range token {
		fmt.Fprintf(&escaped, `\u%04x`, r)
	}
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: name}, Data: data}
	}
	const refusal = "carries a ComputePlane's credential (a token issued to system:serviceaccount:computeplane-system:computeplane-applier"
	copies := map[string]map[string][]byte{
		"the kubeconfig as is":                {"value": kubeconfig},
		"under another key":                   {"config": kubeconfig},
		"the bare token, for valuesFrom":      {"values.yaml": []byte("token: " + token + "\n")},
		"every character escaped":             {"values.yaml": []byte(`token: "` + escaped.String() + `"` + "\n")},
		"base64 once more":                    {"value": []byte(base64.StdEncoding.EncodeToString(kubeconfig))},
		"beside an innocent key (stringData)": nil, // filled below
	}
	for what, data := range copies {
		s := secret("copy-"+rand.String(5), data)
		if data == nil {
			s.Data = map[string][]byte{"ca.crt": []byte("not a token")}
			s.StringData = map[string]string{"kubeconfig": string(kubeconfig)}
		}
		if err := mallory.Create(ctx, s); err == nil {
			t.Errorf("%s: a copy of the plane's credential was stored", what)
		} else if !strings.Contains(err.Error(), refusal) {
			t.Errorf("%s: refused for another reason: %v", what, err)
		}
	}
	// Into a Secret that exists, by update: refused the same.
	innocent := secret("notes", map[string][]byte{"note": []byte("hello")})
	if err := mallory.Create(ctx, innocent); err != nil {
		t.Fatalf("an ordinary Secret was refused: %v", err)
	}
	innocent.Data["kubeconfig"] = kubeconfig
	denied(t, mallory.Update(ctx, innocent), refusal)
	// Its metadata still changes (the content was judged when it was written).
	fresh := &corev1.Secret{}
	if err := mallory.Get(ctx, client.ObjectKeyFromObject(innocent), fresh); err != nil {
		t.Fatal(err)
	}
	metav1.SetMetaDataLabel(&fresh.ObjectMeta, "team", "data")
	if err := mallory.Update(ctx, fresh); err != nil {
		t.Errorf("a label on an ordinary Secret was refused: %v", err)
	}
	// The tenant's own credentials (another cluster's kubeconfig) are not the plane's.
	own := secret("own-cluster", map[string][]byte{"value": fakeKubeconfig(t, "https://elsewhere.example:6443", nil)})
	if err := mallory.Create(ctx, own); err != nil {
		t.Errorf("a kubeconfig for another cluster was refused: %v", err)
	}
}
