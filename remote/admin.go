package remote

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AdminCredential is a plane's admin credential reduced to what the operator accepts:
// a server it was told about by the control plane's own status, the CA to verify it, and
// an inline client certificate and key. Nothing in it can make the operator read a file,
// run a program, use a proxy, skip TLS verification or send its own credential (its
// ServiceAccount token) anywhere.
type AdminCredential struct {
	Server string
	// Identity is the certificate's common name: the user the plane's API server sees.
	Identity string
	// Hash identifies the credential, so a rotation builds a new client.
	Hash string

	// kubeconfig is what the credential was read from. The CA, certificate and key are
	// taken from it when a connection or the applier's kubeconfig is built (material):
	// a pass that finds the credential unchanged (AdminCredentialMemo) needs only Hash.
	kubeconfig []byte
	pem        *credentialPEM
}

type credentialPEM struct{ ca, cert, key []byte }

// material is the credential's CA, certificate and key, parsed again from the
// kubeconfig it was read from when a pass did not need them before.
func (c *AdminCredential) material() (*credentialPEM, error) {
	if c.pem != nil {
		return c.pem, nil
	}
	full, err := ParseAdminKubeconfig(c.kubeconfig, []string{c.Server})
	if err != nil {
		return nil, fmt.Errorf("the admin kubeconfig: %w", err)
	}
	if full.Hash != c.Hash {
		return nil, errors.New("the admin kubeconfig is not the one the credential was read from")
	}
	c.pem = full.pem
	return c.pem, nil
}

// RESTConfig is a client configuration that uses exactly the credential.
func (c *AdminCredential) RESTConfig() (*rest.Config, error) {
	m, err := c.material()
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            c.Server,
		TLSClientConfig: rest.TLSClientConfig{CAData: m.ca, CertData: m.cert, KeyData: m.key},
	}, nil
}

// ParseAdminKubeconfig accepts a kubeconfig only when its current context uses inline
// client-certificate-data, client-key-data and certificate-authority-data, and a server
// among allowedServers (the endpoints the control plane itself reports). Anything a
// kubeconfig can do beyond that (tokenFile, exec, auth-provider, file paths, tokens,
// basic auth, impersonation, proxy-url, insecure-skip-tls-verify, tls-server-name, or a
// foreign server) is refused with an error that names the field. It is pure: the data is
// only parsed, never resolved.
func ParseAdminKubeconfig(data []byte, allowedServers []string) (*AdminCredential, error) {
	if len(data) == 0 {
		return nil, errors.New("is empty")
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, errors.New("is not a kubeconfig")
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if cfg.CurrentContext == "" || kctx == nil {
		return nil, errors.New("has no current context")
	}
	cluster, user := cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo]
	if cluster == nil || user == nil {
		return nil, fmt.Errorf("context %q names a cluster or user it does not define", cfg.CurrentContext)
	}
	if err := refuseClusterFields(cluster); err != nil {
		return nil, err
	}
	if err := refuseUserFields(user); err != nil {
		return nil, err
	}
	server, err := normalizeServer(cluster.Server)
	if err != nil {
		return nil, err
	}
	allowed := false
	for _, a := range allowedServers {
		if n, err := normalizeServer(a); err == nil && n == server {
			allowed = true
		}
	}
	if !allowed {
		return nil, fmt.Errorf("points at server %q, which is not an endpoint the control plane reports (%s)",
			cluster.Server, strings.Join(allowedServers, ", "))
	}
	identity, err := certificateUser(user.ClientCertificateData)
	if err != nil {
		return nil, err
	}
	if _, err := tls.X509KeyPair(user.ClientCertificateData, user.ClientKeyData); err != nil {
		return nil, errors.New("has a client key that does not match its certificate")
	}
	sum := sha256.New()
	for _, b := range [][]byte{[]byte(server), cluster.CertificateAuthorityData, user.ClientCertificateData, user.ClientKeyData} {
		sum.Write(b)
		sum.Write([]byte{0})
	}
	return &AdminCredential{
		Server: server, Identity: identity, Hash: hex.EncodeToString(sum.Sum(nil)), kubeconfig: data,
		pem: &credentialPEM{ca: cluster.CertificateAuthorityData, cert: user.ClientCertificateData, key: user.ClientKeyData},
	}, nil
}

type refused struct {
	field string
	set   bool
}

const acceptedFields = "the operator accepts only inline client-certificate-data, client-key-data and certificate-authority-data"

func refuseClusterFields(c *clientcmdapi.Cluster) error {
	for _, f := range []refused{
		{"certificate-authority (a file path)", c.CertificateAuthority != ""},
		{"insecure-skip-tls-verify", c.InsecureSkipTLSVerify},
		{"proxy-url", c.ProxyURL != ""},
		{"tls-server-name", c.TLSServerName != ""},
	} {
		if f.set {
			return fmt.Errorf("sets clusters[].cluster.%s; %s", f.field, acceptedFields)
		}
	}
	if len(c.CertificateAuthorityData) == 0 {
		return fmt.Errorf("has no certificate-authority-data; %s", acceptedFields)
	}
	return nil
}

func refuseUserFields(u *clientcmdapi.AuthInfo) error {
	for _, f := range []refused{
		{"client-certificate (a file path)", u.ClientCertificate != ""},
		{"client-key (a file path)", u.ClientKey != ""},
		{"token", u.Token != ""},
		{"tokenFile", u.TokenFile != ""},
		{"as (impersonation)", u.Impersonate != "" || u.ImpersonateUID != "" || len(u.ImpersonateGroups) > 0 || len(u.ImpersonateUserExtra) > 0},
		{"username/password", u.Username != "" || u.Password != ""},
		{"auth-provider", u.AuthProvider != nil},
		{"exec", u.Exec != nil},
	} {
		if f.set {
			return fmt.Errorf("sets users[].user.%s; %s", f.field, acceptedFields)
		}
	}
	if len(u.ClientCertificateData) == 0 || len(u.ClientKeyData) == 0 {
		return fmt.Errorf("has no client-certificate-data and client-key-data, so the operator cannot tell its own identity in the plane; %s", acceptedFields)
	}
	return nil
}

// normalizeServer keeps https://host:port, lower-cased, and refuses anything else
// (another scheme, a path, user info, a query).
func normalizeServer(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("has server %q; only https://host:port is accepted", s)
	}
	host := strings.ToLower(u.Host)
	if u.Port() == "" {
		host += ":443"
	}
	return "https://" + host, nil
}

// certificateUser is the user name a client certificate authenticates as (its CN).
func certificateUser(data []byte) (string, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return "", errors.New("has a client certificate that is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("has a client certificate that does not parse: %v", err)
	}
	if cert.Subject.CommonName == "" {
		return "", errors.New("has a client certificate without a common name")
	}
	return cert.Subject.CommonName, nil
}
