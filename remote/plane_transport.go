package remote

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// A plane has two HTTP transports, each one HTTP/2 connection at most:
//   - the streams' (its watches and the storage probe), open while the plane is watched.
//     It carries only small answers (metadata watch events, one-item lists, one
//     namespace), so its buffers stay small: crypto/tls keeps its record buffer at the
//     largest record it ever read (up to 16 KiB) and the HTTP/2 framer its read buffer
//     at the largest frame, for as long as the connection lives;
//   - the reads' (the plane's client, canary and discovery: full reads, server-side
//     applies), whose answers fill whole records and frames. It closes once idle for
//     readsIdleTimeout, so a plane at rest (read in full every resync interval) keeps no
//     second connection, nor its buffers, between its reads.
//
// Both are built here, as client-go's shared transport cache would build them (same
// TLS, dial and idle settings, HTTP/2 with its health checks), for one setting
// client-go does not expose: no HTTP/2 header compression tables. HPACK keeps a dynamic
// table each way per connection (up to 4 KiB of headers each, with their indexes: about
// 18 KB of live heap per plane). The operator sends a few short
// requests a minute to a plane at rest; the bytes indexing would save are not worth the
// memory.
//
// The two share one TLS configuration (its parsed CA and key pair): a transport clones
// it for each connection, as net/http does, and never changes it.
func planeTransport(tlsConfig *tls.Config, idle time.Duration) http.RoundTripper {
	return utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     idle,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		// 1, not 0: 0 means the default (4 KiB). No header fits in 1 byte, so nothing
		// is ever indexed, either way.
		HTTP2: &http.HTTP2Config{MaxDecoderHeaderTableSize: 1, MaxEncoderHeaderTableSize: 1},
	})
}

// readsIdleTimeout is how long a plane's reads connection outlives its last request:
// long enough for the requests of one reconcile and the next, short beside the resync
// interval. A variable for the tests.
var readsIdleTimeout = 15 * time.Second
