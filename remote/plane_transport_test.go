package remote

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"golang.org/x/net/http2"
	"k8s.io/client-go/rest"
)

// TestPlaneTransportSpeaksHTTP2WithoutHeaderTables: a plane's transport negotiates HTTP/2
// and tells the server, in its
// first SETTINGS, to keep no header compression table for it.
func TestPlaneTransportSpeaksHTTP2WithoutHeaderTables(t *testing.T) {
	settings := make(chan map[http2.SettingID]uint32, 1)
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.EnableHTTP2 = true
	srv.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
		"h2": func(_ *http.Server, c *tls.Conn, _ http.Handler) {
			defer func() { _ = c.Close() }()
			got := map[http2.SettingID]uint32{}
			defer func() { settings <- got }()
			if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
				return
			}
			f, err := http2.NewFramer(nil, c).ReadFrame()
			if err != nil {
				return
			}
			if sf, ok := f.(*http2.SettingsFrame); ok {
				_ = sf.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil })
			}
		},
	}
	srv.StartTLS()
	defer srv.Close()

	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	transport := planeTransport(tlsConfig, 0)
	hc, err := httpClientFor(cfg, transport)
	if err != nil {
		t.Fatal(err)
	}
	hc.Timeout = 5 * time.Second
	resp, err := hc.Get(srv.URL + "/api")
	if err == nil {
		_ = resp.Body.Close()
	}
	select {
	case got := <-settings:
		if v, ok := got[http2.SettingHeaderTableSize]; !ok || v != 1 {
			t.Errorf("the client's SETTINGS %v: header table size %d (sent: %v), want 1", got, v, ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the transport did not speak HTTP/2 (request: %v)", err)
	}
}

// TestPlaneConnections: a plane's watches and probe share one connection, its client,
// canary and discovery another, and that one closes once idle, while the streams' stays:
// the large answers of full reads never grow the buffers of the connection kept open.
func TestPlaneConnections(t *testing.T) {
	defer func(d time.Duration) { readsIdleTimeout = d }(readsIdleTimeout)
	readsIdleTimeout = 300 * time.Millisecond

	var mu sync.Mutex
	addrs := map[string]string{} // path -> the client's address (one per connection)
	closed := map[string]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		addrs[r.URL.Path] = r.RemoteAddr
		mu.Unlock()
		if r.URL.Path == "/big" {
			_, _ = w.Write(make([]byte, 64<<10))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"kube-system"}}`)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			mu.Lock()
			closed[c.RemoteAddr().String()] = true
			mu.Unlock()
		}
	}
	srv.StartTLS()
	defer srv.Close()

	certPEM, keyPEM := keyPair(t, "operator")
	cred := &AdminCredential{Server: srv.URL, Identity: "operator", Hash: "1", pem: &credentialPEM{cert: certPEM, key: keyPEM,
		ca: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}}
	c := &ClusterCache{Timeout: 5 * time.Second}
	e, err := c.build(types.NamespacedName{Namespace: "tenant", Name: "plane"}, cred)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := readsFromStorage(ctx, e.probeClient); err != nil {
		t.Fatal(err)
	}
	get := func(hc *http.Client, path string) {
		t.Helper()
		resp, err := hc.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s answered over %s, want HTTP/2", path, resp.Proto)
		}
	}
	get(e.watchHTTP, "/watch")
	get(e.clientHTTP, "/big")
	get(e.canaryHTTP, "/canary")

	mu.Lock()
	probe, watch, read, canary := addrs["/api/v1/namespaces/kube-system"], addrs["/watch"], addrs["/big"], addrs["/canary"]
	mu.Unlock()
	if probe == "" || probe != watch {
		t.Errorf("the probe (from %q) and the watches (from %q) do not share a connection", probe, watch)
	}
	if read == "" || read != canary {
		t.Errorf("the client (from %q) and the canary (from %q) do not share a connection", read, canary)
	}
	if read == probe {
		t.Fatalf("a full read's answer came on the streams' connection (%s)", read)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		readClosed, probeClosed := closed[read], closed[probe]
		mu.Unlock()
		if probeClosed {
			t.Fatal("the streams' connection closed when idle for a moment")
		}
		if readClosed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reads' connection is still open 5 s after its last request")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
