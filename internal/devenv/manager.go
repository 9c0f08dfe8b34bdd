package devenv

import (
	"context"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// WebhookServer returns a webhook server that listens where the management apiserver
// was told to call it (envtest generated the serving certificate and the
// ValidatingWebhookConfiguration's caBundle).
func (c *Cluster) WebhookServer() webhook.Server {
	o := c.Env.WebhookInstallOptions
	return webhook.NewServer(webhook.Options{Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir})
}

// WaitReadyz polls a manager's readiness endpoint (http://addr/readyz, what the
// Deployment's readiness probe asks) until it answers 200 or timeout passes; exited,
// asked between polls, returns an error once the manager's process is gone.
func WaitReadyz(ctx context.Context, addr string, interval, timeout time.Duration, exited func() error) error {
	readyz := "http://" + addr + "/readyz"
	return wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		if err := exited(); err != nil {
			return false, err
		}
		resp, err := http.Get(readyz)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}
