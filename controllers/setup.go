package controllers

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Options configure the controllers the manager runs.
type Options struct {
	Setup SetupOptions
	// RequeueInterval is how long a plane waiting on something that sends no event
	// waits before it looks again.
	RequeueInterval time.Duration
	// Webhooks registers the admission webhooks (off only for local runs without TLS).
	Webhooks bool
}

// Setup registers every controller and webhook with the manager.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	r := &ComputePlaneReconciler{
		Client:          mgr.GetClient(),
		APIReader:       mgr.GetAPIReader(),
		Events:          mgr.GetEventRecorder("computeplane-controller"),
		RequeueInterval: o.RequeueInterval,
	}
	if err := r.SetupWithManager(ctx, mgr, o.Setup); err != nil {
		return err
	}
	if o.Webhooks {
		if err := (&ComputePlaneValidator{Reader: mgr.GetAPIReader()}).SetupWebhookWithManager(mgr); err != nil {
			return err
		}
	}
	return nil
}
