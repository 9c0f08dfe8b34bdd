package remote

import (
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cozystack/computeplane/internal/devenv"
)

// keyPair is a self-signed client certificate with the given common name.
func keyPair(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := devenv.ClientCertificate(cn)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// kamajiKubeconfig is an admin kubeconfig of Kamaji's shape (server
// https://p.cp-a.svc:6443, cert as both CA and client certificate), changed by mut.
func kamajiKubeconfig(t *testing.T, cert, key []byte, mut func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo)) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	c := &clientcmdapi.Cluster{Server: "https://p.cp-a.svc:6443", CertificateAuthorityData: cert}
	u := &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	if mut != nil {
		mut(c, u)
	}
	cfg.Clusters["p"], cfg.AuthInfos["admin"] = c, u
	cfg.Contexts["admin@p"] = &clientcmdapi.Context{Cluster: "p", AuthInfo: "admin"}
	cfg.CurrentContext = "admin@p"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseAdminKubeconfig(t *testing.T) {
	cert, key := keyPair(t, "kubernetes-super-admin")
	otherCert, _ := keyPair(t, "someone")
	allowed := []string{"https://10.0.0.1:6443", "https://p.cp-a.svc:6443"}
	build := func(mut func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo)) []byte {
		return kamajiKubeconfig(t, cert, key, mut)
	}
	cases := []struct {
		name string
		data []byte
		want string // "" accepts
	}{
		{"kamaji's shape", build(nil), ""},
		{"the endpoint, without a scheme written", build(func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = "10.0.0.1:6443" }), ""},
		{"empty", nil, "is empty"},
		{"garbage", []byte("{["), "is not a kubeconfig"},
		{"no context", []byte("apiVersion: v1\nkind: Config\n"), "has no current context"},
		{"tokenFile (the operator's own token)", build(func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.TokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}), "users[].user.tokenFile"},
		{"token", build(func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.Token = "t" }), "users[].user.token"},
		{"exec", build(func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", APIVersion: "client.authentication.k8s.io/v1"}
		}), "users[].user.exec"},
		{"auth-provider", build(func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"}
		}), "users[].user.auth-provider"},
		{"certificate file", build(func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ClientCertificate = "/etc/passwd" }), "client-certificate (a file path)"},
		{"key file", build(func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ClientKey = "/etc/shadow" }), "client-key (a file path)"},
		{"impersonation", build(func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.Impersonate = "system:admin" }), "impersonation"},
		{"basic auth", build(func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.Username, u.Password = "a", "b" }), "username/password"},
		{"no client certificate", build(func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ClientCertificateData = nil }), "no client-certificate-data"},
		{"mismatched key", build(func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ClientCertificateData = otherCert }), "does not match"},
		{"CA file", build(func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.CertificateAuthority = "/etc/ssl/ca.pem" }), "certificate-authority (a file path)"},
		{"no CA", build(func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.CertificateAuthorityData = nil }), "no certificate-authority-data"},
		{"insecure", build(func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.InsecureSkipTLSVerify = true }), "insecure-skip-tls-verify"},
		{"proxy", build(func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.ProxyURL = "http://attacker:3128" }), "proxy-url"},
		{"tls server name", build(func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.TLSServerName = "kubernetes" }), "tls-server-name"},
		{"foreign server", build(func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = "https://attacker.example:6443" }), "not an endpoint the control plane reports"},
		{"plain http", build(func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = "http://p.cp-a.svc:6443" }), "only https://host:port"},
		{"a path", build(func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.Server = "https://p.cp-a.svc:6443/api/v1/namespaces/x/services/y/proxy"
		}), "only https://host:port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cred, err := ParseAdminKubeconfig(tc.data, allowed)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if cred.Identity != "kubernetes-super-admin" || cred.Hash == "" {
					t.Errorf("identity %q hash %q", cred.Identity, cred.Hash)
				}
				cfg, err := cred.RESTConfig()
				if err != nil {
					t.Fatal(err)
				}
				if cfg.BearerToken != "" || cfg.BearerTokenFile != "" || cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.Proxy != nil || cfg.Insecure {
					t.Errorf("the client configuration can do more than the certificate: %+v", cfg)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
