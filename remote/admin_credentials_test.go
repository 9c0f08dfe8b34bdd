package remote

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// adminKubeconfig is a kubeconfig of Kamaji's shape for server, with a fresh key pair.
func adminKubeconfig(t *testing.T, server string) []byte {
	t.Helper()
	cert, key := keyPair(t, "kubernetes-super-admin")
	return kamajiKubeconfig(t, cert, key, func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = server })
}

func TestAdminCredentialsRememberOnlyWhatParsed(t *testing.T) {
	const server = "https://p.cp-a.svc:6443"
	servers := []string{server}
	first, rotated := adminKubeconfig(t, server), adminKubeconfig(t, server)
	foreign := adminKubeconfig(t, "https://elsewhere.example:6443")
	key, other := types.NamespacedName{Namespace: "t", Name: "a"}, types.NamespacedName{Namespace: "t", Name: "b"}

	// One memo per plane, kept as the controllers keep it (in the plane's state).
	memos := map[types.NamespacedName]AdminCredentialMemo{}
	parse := func(key types.NamespacedName, data []byte, servers []string) (cred *AdminCredential, remembered bool, err error) {
		t.Helper()
		cred, memos[key], err = memos[key].Parse(data, servers)
		if err != nil {
			if memos[key].Held() {
				t.Fatalf("a refused kubeconfig left a credential remembered")
			}
			return nil, false, err
		}
		if !memos[key].Held() {
			t.Fatalf("a credential that parsed was not remembered")
		}
		// A remembered credential has not been parsed: its PEM blocks are not loaded yet.
		return cred, cred.pem == nil, nil
	}
	full, err := ParseAdminKubeconfig(first, servers)
	if err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name       string
		key        types.NamespacedName
		data       []byte
		servers    []string
		remembered bool
		refused    string
	}{
		{"first pass parses", key, first, servers, false, ""},
		{"the same Secret again is remembered", key, first, servers, true, ""},
		{"another plane with the same bytes is its own entry", other, first, servers, false, ""},
		{"the control plane no longer reports the server: refused, not remembered", key, first, []string{"https://10.0.0.9:6443"}, false, "not an endpoint the control plane reports"},
		{"the refusal was not remembered as a success, nor the earlier success kept", key, first, []string{"https://10.0.0.9:6443"}, false, "not an endpoint"},
		{"back to the reported server: parsed again", key, first, servers, false, ""},
		{"a rotated kubeconfig is parsed", key, rotated, servers, false, ""},
		{"a kubeconfig for a foreign server is refused", key, foreign, servers, false, "not an endpoint"},
	}
	for _, st := range steps {
		cred, remembered, err := parse(st.key, st.data, st.servers)
		if st.refused != "" {
			if err == nil || !strings.Contains(err.Error(), st.refused) {
				t.Fatalf("%s: error %v, want one containing %q", st.name, err, st.refused)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if remembered != st.remembered {
			t.Fatalf("%s: remembered = %v, want %v", st.name, remembered, st.remembered)
		}
		want, err := ParseAdminKubeconfig(st.data, st.servers)
		if err != nil {
			t.Fatal(err)
		}
		if cred.Hash != want.Hash || cred.Identity != want.Identity || cred.Server != want.Server {
			t.Fatalf("%s: %s/%s/%s, want %s/%s/%s", st.name, cred.Hash, cred.Identity, cred.Server, want.Hash, want.Identity, want.Server)
		}
		// A remembered credential still builds exactly the parsed one's connection.
		cfg, err := cred.RESTConfig()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !bytes.Equal(cfg.CAData, want.pem.ca) || !bytes.Equal(cfg.CertData, want.pem.cert) || !bytes.Equal(cfg.KeyData, want.pem.key) {
			t.Fatalf("%s: the client configuration is not the kubeconfig's", st.name)
		}
	}
	if _, _, err := parse(key, first, servers); err != nil {
		t.Fatal(err)
	}
	delete(memos, key)
	if _, remembered, _ := parse(key, first, servers); remembered {
		t.Fatal("a forgotten plane's credential was remembered")
	}

	// A remembered credential whose bytes are not what it was remembered for (a caller
	// bug) builds nothing rather than a connection with another credential.
	stale := &AdminCredential{Server: full.Server, Identity: full.Identity, Hash: full.Hash, kubeconfig: rotated}
	if _, err := stale.RESTConfig(); err == nil {
		t.Fatal("a credential built a connection from another kubeconfig than the one it names")
	}
	if _, err := ApplierKubeconfig(stale, "token"); err == nil {
		t.Fatal("an applier kubeconfig was written from another kubeconfig than the credential names")
	}
}
