package remote

import (
	"net"
	"net/http"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// planeTransport is a plane's one HTTP transport: the plane's client, its canary and its
// watches are streams of one HTTP/2 connection. It is built here, as client-go's shared
// transport cache would build it (same TLS, dial and idle settings, HTTP/2 with its
// health checks), for one setting client-go does not expose: no HTTP/2 header
// compression tables. HPACK keeps a dynamic table each way per connection (up to 4 KiB
// of headers each, with their indexes: about 18 KB of live heap per plane, 9 MB at 500
// planes). The operator sends a few short requests a minute to a plane at rest; the
// bytes indexing would save are not worth the memory.
func planeTransport(cfg *rest.Config) (http.RoundTripper, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	return utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		// 1, not 0: 0 means the default (4 KiB). No header fits in 1 byte, so nothing
		// is ever indexed, either way.
		HTTP2: &http.HTTP2Config{MaxDecoderHeaderTableSize: 1, MaxEncoderHeaderTableSize: 1},
	}), nil
}
