package tenancy

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

func testJWT(sub string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"k1"}`)) + "." +
		enc([]byte(fmt.Sprintf(`{"aud":["https://kubernetes.default.svc"],"exp":1900000000,"sub":%q}`, sub))) + "." +
		enc([]byte("signature-bytes-of-the-plane"))
}

func wrap(s string, n int) string {
	var b strings.Builder
	for len(s) > n {
		b.WriteString(s[:n] + "\n")
		s = s[n:]
	}
	return b.String() + s
}

func isApplier(sub string) bool {
	return strings.HasPrefix(sub, "system:serviceaccount:computeplane-system:")
}

func TestPlaneCredentialIn(t *testing.T) {
	tok := testJWT("system:serviceaccount:computeplane-system:computeplane-applier")
	mgmt := testJWT("system:serviceaccount:tenant-a:builder")
	kubeconfig := func(token string) string {
		return "apiVersion: v1\nkind: Config\nclusters: [{name: p, cluster: {server: 'https://plane:6443'}}]\n" +
			"users: [{name: u, user: {token: " + token + "}}]\ncontexts: [{name: c, context: {cluster: p, user: u}}]\ncurrent-context: c\n"
	}
	// escape writes every character of s as a YAML/JSON escape: no byte of the token left.
	escape := func(s string) string {
		var b strings.Builder
		for _, r := range s {
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		return b.String()
	}
	half := len(tok) / 2
	cases := []struct {
		name  string
		data  map[string][]byte
		found string // key, or "" for none
	}{
		{"the kubeconfig copied under another key", map[string][]byte{"config": []byte(kubeconfig(tok))}, "config"},
		{"the bare token, for valuesFrom", map[string][]byte{"token": []byte(tok)}, "token"},
		{"the token escaped in a double-quoted YAML string", map[string][]byte{"value": []byte(kubeconfig(`"` + escape(tok) + `"`))}, "value"},
		{"the token escaped in JSON", map[string][]byte{"value.json": []byte(`{"users":[{"user":{"token":"` + escape(tok) + `"}}]}`)}, "value.json"},
		{"the token folded over an escaped line break", map[string][]byte{"values.yaml": []byte("t: \"" + tok[:half] + "\\\n  " + tok[half:] + "\"\n")}, "values.yaml"},
		{"the token behind a YAML alias", map[string][]byte{"v": []byte("a: &x \"" + escape(tok) + "\"\nb: *x\n")}, "v"},
		{"the kubeconfig base64 once more", map[string][]byte{"value": []byte(base64.StdEncoding.EncodeToString([]byte(kubeconfig(tok))))}, "value"},
		{"a YAML string holding the token in base64", map[string][]byte{"values.yaml": []byte("t: " + base64.StdEncoding.EncodeToString([]byte(tok)) + "\n")}, "values.yaml"},
		{"the kubeconfig in base64 wrapped at 76 columns", map[string][]byte{"value": []byte(wrap(base64.StdEncoding.EncodeToString([]byte(kubeconfig(tok))), 76))}, "value"},
		{"the token in base64 inside a longer document", map[string][]byte{"values.yaml": []byte("a: 1\nnested: {t: '" + base64.StdEncoding.EncodeToString([]byte(tok)) + "'}\n")}, "values.yaml"},
		{"the first of several keys in order", map[string][]byte{"b": []byte(tok), "a": []byte(tok)}, "a"},
		{"a management token is the tenant's own", map[string][]byte{"value": []byte(kubeconfig(mgmt))}, ""},
		{"no token at all", map[string][]byte{"password": []byte("hunter2"), "ca.crt": []byte("-----BEGIN CERTIFICATE-----")}, ""},
		{"not YAML, not base64", map[string][]byte{"bin": {0xff, 0x00, '{', ':'}}, ""},
		{"empty", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := PlaneCredentialIn(c.data, isApplier)
			if c.found == "" {
				if ok {
					t.Fatalf("found %+v, want nothing", got)
				}
				return
			}
			if !ok || got.Key != c.found || got.Subject != "system:serviceaccount:computeplane-system:computeplane-applier" {
				t.Fatalf("got %+v (found %v), want key %q", got, ok, c.found)
			}
		})
	}
}

// BenchmarkPlaneCredentialIn measures what judging one Secret costs the webhook: an
// ordinary one (a password, a TLS pair), and the worst a tenant can write (a 1 MiB value
// of YAML strings, each parsed and searched).
func BenchmarkPlaneCredentialIn(b *testing.B) {
	var big strings.Builder
	for big.Len() < 1<<20 {
		fmt.Fprintf(&big, "k%d: \"eyJhbGciOi.eyJzdWIi.%d\"\n", big.Len(), big.Len())
	}
	for _, c := range []struct {
		name string
		data map[string][]byte
	}{
		{"ordinary", map[string][]byte{"password": []byte("hunter2-hunter2"), "tls.crt": []byte(strings.Repeat("MIIB", 400)), "tls.key": []byte(strings.Repeat("MIIE", 400))}},
		{"1MiB-yaml", map[string][]byte{"values.yaml": []byte(big.String())}},
		{"worst=1MiB-yaml-escaped", map[string][]byte{"values.yaml": []byte(big.String() + "e: \"\\u0065\"\n")}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := PlaneCredentialIn(c.data, isApplier); ok {
					b.Fatal("found a credential")
				}
			}
		})
	}
}
