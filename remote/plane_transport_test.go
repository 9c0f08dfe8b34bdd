package remote

import (
	"crypto/tls"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/client-go/rest"
)

// TestPlaneTransportSpeaksHTTP2WithoutHeaderTables: a plane's transport negotiates HTTP/2
// (its client, canary and watches share one connection) and tells the server, in its
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
	transport, err := planeTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
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
