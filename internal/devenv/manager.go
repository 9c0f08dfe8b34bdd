package devenv

import (
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// WebhookServer returns a webhook server that listens where the management apiserver
// was told to call it (envtest generated the serving certificate and the
// ValidatingWebhookConfiguration's caBundle).
func (c *Cluster) WebhookServer() webhook.Server {
	o := c.Env.WebhookInstallOptions
	return webhook.NewServer(webhook.Options{Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir})
}
