package placement

import (
	"bytes"
	"fmt"
	"sort"

	"k8s.io/client-go/tools/clientcmd"
)

// kubeconfigFileFields are the kubeconfig fields (as written) that make whoever loads
// the kubeconfig read a file of its own disk or run a program: client-go's clientcmd
// reads a user's tokenFile into the bearer token, and Flux keeps that token
// (fluxcd/pkg/runtime/client.KubeConfig copies BearerToken), so a tenant's kubeconfig
// naming the path of the controller's ServiceAccount token sends the shared
// controller's identity to the kubeconfig's server, the tenant's. The other fields Flux
// drops today (it keeps inline data only, and exec only with --insecure-kubeconfig-exec),
// but none of them has a use in a tenant's kubeconfig either.
var kubeconfigFileFields = [][]byte{
	[]byte("tokenFile"), []byte("client-certificate"), []byte("client-key"),
	[]byte("certificate-authority"), []byte("exec"), []byte("auth-provider"),
}

// controllerFilesIn finds, in a Secret's data, a kubeconfig that names a file or a
// program of the controller that would load it: the key and the field, as
// "users[<name>].tokenFile". A value is parsed as a kubeconfig only when it could be
// one that names such a field: it holds one of their names, or a backslash (the one way
// a YAML or JSON key can be spelled without its letters). A value that is no
// kubeconfig is no concern here (Flux cannot load it either).
func controllerFilesIn(data map[string][]byte) (key, field string, found bool) {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := data[k]
		if !mayNameFiles(v) {
			continue
		}
		cfg, err := clientcmd.Load(v)
		if err != nil {
			continue
		}
		names := make([]string, 0, len(cfg.AuthInfos))
		for n := range cfg.AuthInfos {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			u := cfg.AuthInfos[n]
			for _, f := range []struct {
				name string
				set  bool
			}{
				{"tokenFile", u.TokenFile != ""}, {"client-certificate", u.ClientCertificate != ""},
				{"client-key", u.ClientKey != ""}, {"exec", u.Exec != nil}, {"auth-provider", u.AuthProvider != nil},
			} {
				if f.set {
					return k, fmt.Sprintf("users[%s].%s", n, f.name), true
				}
			}
		}
		clusters := make([]string, 0, len(cfg.Clusters))
		for n := range cfg.Clusters {
			clusters = append(clusters, n)
		}
		sort.Strings(clusters)
		for _, n := range clusters {
			if cfg.Clusters[n].CertificateAuthority != "" {
				return k, fmt.Sprintf("clusters[%s].certificate-authority", n), true
			}
		}
	}
	return "", "", false
}

func mayNameFiles(v []byte) bool {
	if bytes.IndexByte(v, '\\') >= 0 {
		return true
	}
	for _, f := range kubeconfigFileFields {
		if bytes.Contains(v, f) {
			return true
		}
	}
	return false
}

// controllerFilesMessage is the refusal of such a Secret.
func controllerFilesMessage(namespace, name, key, field string) string {
	return fmt.Sprintf("Secret %s/%s key %q holds a kubeconfig whose %s names a file or a program on the disk of the controller that reads it "+
		"(Flux would send what it reads there, its own ServiceAccount token for one, to the kubeconfig's server): "+
		"write the data inline (token, client-certificate-data, client-key-data, certificate-authority-data)", namespace, name, key, field)
}
