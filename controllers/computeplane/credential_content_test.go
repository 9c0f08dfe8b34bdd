package computeplane

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/remote/posture"
)

// fakeJWT is an unsigned token with the claims of a ServiceAccount token.
func fakeJWT(t *testing.T, sub, uid string, exp time.Time) string {
	t.Helper()
	claims := map[string]any{"sub": sub, "exp": exp.Unix(),
		"kubernetes.io": map[string]any{"namespace": posture.ApplierNamespace, "serviceaccount": map[string]any{"name": posture.ApplierName, "uid": uid}}}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(payload) + "." + enc([]byte("signature"))
}

// testKubeconfig builds a kubeconfig as remote.ApplierKubeconfig does, for server.
func testKubeconfig(server string) func(token string) ([]byte, error) {
	return func(token string) ([]byte, error) {
		out := clientcmdapi.NewConfig()
		out.Clusters["plane"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: []byte("plane CA")}
		out.AuthInfos[posture.ApplierName] = &clientcmdapi.AuthInfo{Token: token}
		out.Contexts[posture.ApplierName+"@plane"] = &clientcmdapi.Context{Cluster: "plane", AuthInfo: posture.ApplierName}
		out.CurrentContext = posture.ApplierName + "@plane"
		return clientcmd.Write(*out)
	}
}

const applierSub = "system:serviceaccount:" + posture.ApplierNamespace + ":" + posture.ApplierName

func TestApplierSecretMismatch(t *testing.T) {
	expires := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	want := credentialWant{labels: map[string]string{"computeplane.cozystack.io/name": "plane", "reconcile.fluxcd.io/watch": "Enabled"}, subject: applierSub,
		kubeconfig: testKubeconfig("https://plane.cp-tenant-a.svc:6443")}
	written := func(t *testing.T) *corev1.Secret {
		value, err := want.kubeconfig(fakeJWT(t, applierSub, "uid-1", expires))
		if err != nil {
			t.Fatal(err)
		}
		return &corev1.Secret{Type: corev1.SecretTypeOpaque, Data: map[string][]byte{cpv1.ApplierKubeconfigKey: value},
			ObjectMeta: metavl(want.labels, map[string]string{cpv1.TokenServiceAccountUIDAnnotation: "uid-1", cpv1.TokenExpiresAtAnnotation: expires.Format(time.RFC3339)})}
	}
	withKubeconfig := func(build func(token string) ([]byte, error), token string) func(*testing.T, *corev1.Secret) {
		return func(t *testing.T, s *corev1.Secret) {
			value, err := build(token)
			if err != nil {
				t.Fatal(err)
			}
			s.Data[cpv1.ApplierKubeconfigKey] = value
		}
	}
	for _, tc := range []struct {
		name   string
		edit   func(*testing.T, *corev1.Secret)
		reason string // "" when the Secret is as written
	}{
		{"as written", func(*testing.T, *corev1.Secret) {}, ""},
		{"another label beside the operator's", func(_ *testing.T, s *corev1.Secret) { s.Labels["team"] = "a" }, ""},
		{"the token's expiry a few seconds off the annotation", func(t *testing.T, s *corev1.Secret) {
			withKubeconfig(want.kubeconfig, fakeJWT(t, applierSub, "uid-1", expires.Add(2*time.Second)))(t, s)
		}, ""},
		{"server pointed at the management API", func(t *testing.T, s *corev1.Secret) {
			withKubeconfig(testKubeconfig("https://kubernetes.default.svc"), fakeJWT(t, applierSub, "uid-1", expires))(t, s)
		}, "kubeconfig: not the plane's"},
		{"TLS verification off", func(t *testing.T, s *corev1.Secret) {
			cfg, err := clientcmd.Load(s.Data[cpv1.ApplierKubeconfigKey])
			if err != nil {
				t.Fatal(err)
			}
			cfg.Clusters["plane"].InsecureSkipTLSVerify = true
			if s.Data[cpv1.ApplierKubeconfigKey], err = clientcmd.Write(*cfg); err != nil {
				t.Fatal(err)
			}
		}, "kubeconfig: not the plane's"},
		{"another ServiceAccount's token", func(t *testing.T, s *corev1.Secret) {
			withKubeconfig(want.kubeconfig, fakeJWT(t, "system:serviceaccount:kube-system:admin", "uid-1", expires))(t, s)
		}, "token: issued to system:serviceaccount:kube-system:admin"},
		{"an earlier applier's token", func(t *testing.T, s *corev1.Secret) {
			withKubeconfig(want.kubeconfig, fakeJWT(t, applierSub, "uid-0", expires))(t, s)
		}, "token: issued to an earlier"},
		{"an older token of the same applier", func(t *testing.T, s *corev1.Secret) {
			withKubeconfig(want.kubeconfig, fakeJWT(t, applierSub, "uid-1", expires.Add(-time.Hour)))(t, s)
		}, "token: expires at"},
		{"a token that is no JWT", func(t *testing.T, s *corev1.Secret) {
			withKubeconfig(want.kubeconfig, "opaque-token")(t, s)
		}, "token: not a JWT"},
		{"no kubeconfig", func(_ *testing.T, s *corev1.Secret) { s.Data[cpv1.ApplierKubeconfigKey] = []byte("{") }, "kubeconfig: does not parse"},
		{"a second key", func(_ *testing.T, s *corev1.Secret) { s.Data["other"] = []byte("x") }, "keys [other value]"},
		{"the kubeconfig under another key", func(_ *testing.T, s *corev1.Secret) {
			s.Data["kubeconfig"] = s.Data[cpv1.ApplierKubeconfigKey]
			delete(s.Data, cpv1.ApplierKubeconfigKey)
		}, "keys [kubeconfig]"},
		{"Flux's watch label removed", func(_ *testing.T, s *corev1.Secret) { delete(s.Labels, "reconcile.fluxcd.io/watch") }, "label reconcile.fluxcd.io/watch"},
		{"another type", func(_ *testing.T, s *corev1.Secret) { s.Type = corev1.SecretTypeServiceAccountToken }, "type kubernetes.io/service-account-token"},
		{"expiry annotation removed", func(_ *testing.T, s *corev1.Secret) { delete(s.Annotations, cpv1.TokenExpiresAtAnnotation) }, "annotation " + cpv1.TokenExpiresAtAnnotation},
		{"expiry annotation moved", func(_ *testing.T, s *corev1.Secret) {
			s.Annotations[cpv1.TokenExpiresAtAnnotation] = expires.Add(24 * time.Hour).Format(time.RFC3339)
		}, "token: expires at"},
		{"expiry annotation brought forward (a rotation sooner, not drift)", func(_ *testing.T, s *corev1.Secret) {
			s.Annotations[cpv1.TokenExpiresAtAnnotation] = expires.Add(-30 * time.Minute).Format(time.RFC3339)
		}, ""},
		{"applier annotation removed", func(_ *testing.T, s *corev1.Secret) { delete(s.Annotations, cpv1.TokenServiceAccountUIDAnnotation) }, "annotation " + cpv1.TokenServiceAccountUIDAnnotation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := written(t)
			tc.edit(t, s)
			got := credentialMismatch(s, want)
			if tc.reason == "" && got != "" || !strings.HasPrefix(got, tc.reason) {
				t.Errorf("mismatch = %q, want %q", got, tc.reason)
			}
		})
	}
}

// TestApplierMemory: the digest follows every part of the Secret the comparison looks
// at, so an edit is never taken for content already verified.
func TestApplierMemory(t *testing.T) {
	key := client.ObjectKey{Namespace: "tenant-a", Name: "plane"}
	base := func() *corev1.Secret {
		return &corev1.Secret{Type: corev1.SecretTypeOpaque, Data: map[string][]byte{cpv1.ApplierKubeconfigKey: []byte("kubeconfig")},
			ObjectMeta: metavl(map[string]string{"reconcile.fluxcd.io/watch": "Enabled"},
				map[string]string{cpv1.TokenServiceAccountUIDAnnotation: "uid-1", cpv1.TokenExpiresAtAnnotation: "2030-01-01T12:00:00Z"})}
	}
	var states planeStates
	m := states.applierSecret()
	if ours, _ := m.recall(key, base()); ours {
		t.Fatal("a Secret never seen is recalled")
	}
	m.forget(key)
	if _, ok := states.states[key]; ok {
		t.Fatal("a recall or a forget made state")
	}
	m.remember(key, base(), "admin-1")
	if ours, admin := m.recall(key, base()); !ours || admin != "admin-1" {
		t.Fatalf("recall = %v, %q; want the Secret remembered against admin-1", ours, admin)
	}
	if ours, _ := states.autoscalerSecret().recall(key, base()); ours {
		t.Fatal("the applier Secret's digest is recalled as the cluster-autoscaler's")
	}
	for name, edit := range map[string]func(*corev1.Secret){
		"value":             func(s *corev1.Secret) { s.Data[cpv1.ApplierKubeconfigKey] = []byte("kubeconfig2") },
		"added key":         func(s *corev1.Secret) { s.Data["x"] = nil },
		"type":              func(s *corev1.Secret) { s.Type = "other" },
		"label":             func(s *corev1.Secret) { s.Labels["reconcile.fluxcd.io/watch"] = "Disabled" },
		"expiry annotation": func(s *corev1.Secret) { s.Annotations[cpv1.TokenExpiresAtAnnotation] = "2031-01-01T12:00:00Z" },
		"uid annotation":    func(s *corev1.Secret) { s.Annotations[cpv1.TokenServiceAccountUIDAnnotation] = "uid-2" },
		"key and value shifted": func(s *corev1.Secret) {
			s.Data = map[string][]byte{cpv1.ApplierKubeconfigKey + "k": []byte("ubeconfig")}
		},
	} {
		s := base()
		edit(s)
		if ours, _ := m.recall(key, s); ours {
			t.Errorf("%s changed, the Secret is still recalled as the operator's", name)
		}
	}
	m.forget(key)
	if ours, _ := m.recall(key, base()); ours {
		t.Error("a forgotten Secret is recalled")
	}
	m.remember(key, base(), "admin-1")
	states.forget(key)
	if ours, _ := m.recall(key, base()); ours {
		t.Error("a forgotten plane's Secret is recalled")
	}
}

// metavl is object metadata with copies of labels and annotations.
func metavl(labels, annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Labels: maps.Clone(labels), Annotations: maps.Clone(annotations)}
}
