package controllers

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/labels"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// MetricsServerOptions serves /metrics to anyone who can reach the port only when asked
// to (secure false); by default a scraper needs a token the API server accepts and the
// right to get /metrics, as kube-state-metrics and Flux do.
func MetricsServerOptions(addr string, secure bool) metricsserver.Options {
	if !secure {
		return metricsserver.Options{BindAddress: addr}
	}
	return metricsserver.Options{
		BindAddress:    addr,
		SecureServing:  true,
		FilterProvider: metricsAuthFilter,
	}
}

// LeaderElectionIDFor is the Lease a shard's replicas elect their leader with: each
// shard has its own leader, and the unsharded manager keeps LeaderElectionID.
func LeaderElectionIDFor(selector labels.Selector) string {
	if selector == nil || selector.Empty() {
		return LeaderElectionID
	}
	sum := sha256.Sum256([]byte(selector.String()))
	return "shard-" + hex.EncodeToString(sum[:4]) + "." + LeaderElectionID
}
