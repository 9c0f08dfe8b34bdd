package devenv

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Kamaji writes a TenantControlPlane's admin kubeconfig into the Secret
// <name>-admin-kubeconfig, under the kubeadm file names, with .svc variants that reach
// the API server through its in-cluster Service. These mirror Kamaji v1.0.0.
const (
	AdminKubeconfigKey         = "admin.conf"
	AdminSvcKubeconfigKey      = "admin.svc"
	SuperAdminKubeconfigKey    = "super-admin.conf"
	SuperAdminSvcKubeconfigKey = "super-admin.svc"
)

// AdminKubeconfigSecretName is the Secret Kamaji names in
// status.kubeconfig.admin.secretName.
func AdminKubeconfigSecretName(tcpName string) string { return tcpName + "-admin-kubeconfig" }

// AdminUser is the user of a tenant's admin kubeconfig (kubeadm's super-admin).
const AdminUser = "kubernetes-super-admin"

// AdminKubeconfigSecret returns the admin kubeconfig Secret of a tenant cluster shaped as
// Kamaji writes it for the TenantControlPlane namespace/name. The credential is a client
// certificate in system:masters, as kubeadm's super-admin.conf is; on loopback the .svc
// variants point at the same address. Extra groups tell one issued certificate from
// another in a tenant's audit log (a rotation keeps the user name).
func AdminKubeconfigSecret(tenant *Cluster, namespace, name string, groups ...string) (*corev1.Secret, error) {
	user, err := tenant.Env.ControlPlane.AddUser(envtest.User{
		Name: AdminUser, Groups: append([]string{"system:masters"}, groups...),
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("creating the tenant admin user: %w", err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return nil, err
	}
	kc := kubeadmShaped(cfg, name, AdminUser)
	for _, cl := range kc.Clusters {
		// The cluster's address as its clients reach it (a latency proxy in front).
		cl.Server = tenant.Config.Host
	}
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      AdminKubeconfigSecretName(name),
			Labels: map[string]string{
				"kamaji.clastix.io/project":   "kamaji",
				"kamaji.clastix.io/name":      name,
				"kamaji.clastix.io/component": "admin-kubeconfig",
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			AdminKubeconfigKey:         data,
			AdminSvcKubeconfigKey:      data,
			SuperAdminKubeconfigKey:    data,
			SuperAdminSvcKubeconfigKey: data,
		},
	}, nil
}

// kubeadmShaped renames envtest's single cluster, user and context the way kubeadm does.
func kubeadmShaped(in *clientcmdapi.Config, clusterName, userName string) *clientcmdapi.Config {
	out := clientcmdapi.NewConfig()
	for _, c := range in.Clusters {
		out.Clusters[clusterName] = c
		break
	}
	for _, a := range in.AuthInfos {
		out.AuthInfos[userName] = a
		break
	}
	ctxName := userName + "@" + clusterName
	out.Contexts[ctxName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: userName}
	out.CurrentContext = ctxName
	return out
}
