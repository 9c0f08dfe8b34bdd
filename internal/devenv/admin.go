package devenv

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PlaneAdminClient talks to a plane as the operator does: with the admin kubeconfig the
// provider (Kamaji) wrote into the plane's infrastructure namespace.
func PlaneAdminClient(ctx context.Context, c client.Client, infraNS, cluster string) (client.Client, error) {
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: infraNS, Name: cluster + "-admin-kubeconfig"}, secret); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["super-admin.svc"])
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: c.Scheme()})
}
