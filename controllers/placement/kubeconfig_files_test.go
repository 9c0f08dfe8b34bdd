package placement

import (
	"strings"
	"testing"
)

func TestControllerFilesIn(t *testing.T) {
	kubeconfig := func(user, cluster string) string {
		return "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://x.example.com\n" + cluster +
			"users:\n- name: u\n  user:\n" + user +
			"contexts:\n- name: k\n  context: {cluster: c, user: u}\ncurrent-context: k\n"
	}
	cases := []struct {
		name  string
		data  map[string][]byte
		field string // "": allowed
	}{
		{"inline token and CA", map[string][]byte{"value": []byte(kubeconfig("    token: abc\n", "    certificate-authority-data: Zm9v\n"))}, ""},
		{"inline client certificate", map[string][]byte{"value": []byte(kubeconfig("    client-certificate-data: Zm9v\n    client-key-data: Zm9v\n", ""))}, ""},
		{"tokenFile", map[string][]byte{"value": []byte(kubeconfig("    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n", ""))}, "users[u].tokenFile"},
		{"tokenFile under another key", map[string][]byte{"a": []byte("x"), "cfg": []byte(kubeconfig("    tokenFile: /t\n", ""))}, "users[u].tokenFile"},
		{"client certificate file", map[string][]byte{"value": []byte(kubeconfig("    client-certificate: /c\n    client-key: /k\n", ""))}, "users[u].client-certificate"},
		{"CA file", map[string][]byte{"value": []byte(kubeconfig("    token: abc\n", "    certificate-authority: /etc/ssl/ca.crt\n"))}, "clusters[c].certificate-authority"},
		{"exec", map[string][]byte{"value": []byte(kubeconfig("    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}\n", ""))}, "users[u].exec"},
		{"auth-provider", map[string][]byte{"value": []byte(kubeconfig("    auth-provider: {name: oidc}\n", ""))}, "users[u].auth-provider"},
		{"as JSON with an escaped key", map[string][]byte{"value": []byte(`{"apiVersion":"v1","kind":"Config","users":[{"name":"u","user":{"\u0074okenFile":"/t"}}]}`)}, "users[u].tokenFile"},
		{"no kubeconfig at all", map[string][]byte{"notes": []byte("we tokenFile nothing here: {")}, ""},
		{"ordinary data", map[string][]byte{"password": []byte("hunter2")}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, field, found := controllerFilesIn(tc.data)
			if found != (tc.field != "") || field != tc.field {
				t.Errorf("controllerFilesIn = %q (found %v), want %q", field, found, tc.field)
			}
		})
	}
	if msg := controllerFilesMessage("ns", "s", "value", "users[u].tokenFile"); !strings.Contains(msg, "on the disk of the controller that reads it") {
		t.Errorf("message %q", msg)
	}
}
