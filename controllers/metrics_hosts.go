package controllers

import (
	"context"
	"net/url"

	clientmetrics "k8s.io/client-go/tools/metrics"
)

// PlanesHostLabel is the host label client-go's request counter
// (rest_client_requests_total) gives requests to any plane's API server.
const PlanesHostLabel = "computeplanes"

// CountPlaneRequestsTogether makes client-go's request counter count the requests to
// every plane's API server under one host label, PlanesHostLabel, and keep the
// management API server's own (mgmtHost: the manager's rest.Config Host). With a host
// label per plane the counter grows by a few series per plane and status code, and
// never loses one: thousands of series for a fleet's Prometheus, and about a kilobyte of
// the manager's heap each. Which plane fails is said per plane by
// computeplane_plane_connection_up and the plane's conditions. Call it before the first
// request.
func CountPlaneRequestsTogether(mgmtHost string) {
	clientmetrics.RequestResult = planesTogether{next: clientmetrics.RequestResult, mgmt: hostOf(mgmtHost)}
}

type planesTogether struct {
	next clientmetrics.ResultMetric
	mgmt string
}

func (p planesTogether) Increment(ctx context.Context, code, method, host string) {
	if host != p.mgmt && host != "none" {
		host = PlanesHostLabel
	}
	p.next.Increment(ctx, code, method, host)
}

// hostOf is the host[:port] client-go labels a request with, from a rest.Config Host
// (a URL, or a bare host[:port]).
func hostOf(h string) string {
	if u, err := url.Parse(h); err == nil && u.Host != "" {
		return u.Host
	}
	return h
}
