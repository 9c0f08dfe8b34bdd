package devenv

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/cozystack/computeplane/internal/devenv/hostproc"
)

// PlaneProxy is a test-only HTTP CONNECT proxy standing in for the management cluster's
// network: it maps the in-cluster addresses Kamaji writes into a TenantControlPlane's
// kubeconfigs (https://<tcp>.<ns>.svc:<port>, and the Service's <ClusterIP>:<port>) to
// the loopback port where the pod runner serves that plane's kube-apiserver.
//
// Clients reach it through HTTPS_PROXY: client-go, the operator's plane transport
// (remote/plane_transport.go) and Kamaji's soot manager all use http.ProxyFromEnvironment,
// which skips the proxy for localhost and loopback targets, so a management apiserver
// on 127.0.0.1 is still reached directly. Only mapped addresses are tunnelled: any other
// target is refused with 502, so a test never reaches the outside world by accident.
type PlaneProxy struct {
	listener net.Listener
	server   *http.Server

	mu     sync.Mutex
	routes map[string]string // host:port asked for -> 127.0.0.1:port dialled
}

// StartPlaneProxy starts a CONNECT proxy on a loopback port.
func StartPlaneProxy() (*PlaneProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &PlaneProxy{listener: l, routes: map[string]string{}}
	p.server = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

// URL is the proxy's address, the value for HTTPS_PROXY.
func (p *PlaneProxy) URL() *url.URL {
	return &url.URL{Scheme: "http", Host: p.listener.Addr().String()}
}

// Route maps the address a client asks for (host:port) to a local one.
func (p *PlaneProxy) Route(from, to string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[from] = to
}

// Unroute forgets every address mapped to the local one.
func (p *PlaneProxy) Unroute(to string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for from, t := range p.routes {
		if t == to {
			delete(p.routes, from)
		}
	}
}

// Lookup is the local address the proxy dials for one a client asks for (host:port).
func (p *PlaneProxy) Lookup(hostPort string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	to, ok := p.routes[hostPort]
	return to, ok
}

// Routes lists the mapped addresses, sorted, for logs and assertions.
func (p *PlaneProxy) Routes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.routes))
	for from, to := range p.routes {
		out = append(out, from+" -> "+to)
	}
	sort.Strings(out)
	return out
}

// Close stops the proxy; open tunnels end when their peers close.
func (p *PlaneProxy) Close() error { return p.server.Close() }

// Export sets HTTPS_PROXY (and https_proxy) for this process to the proxy.
//
// net/http evaluates the proxy environment ONCE per process, on the first request that
// consults http.ProxyFromEnvironment; a later change is never seen. Call Export before
// any HTTP request of the process (in TestMain). It checks that the setting took effect
// and says so if it did not.
func (p *PlaneProxy) Export() error {
	u := p.URL().String()
	outsideMu.Lock()
	if outside == nil {
		outside = map[string]string{}
		for _, k := range proxyVars {
			if v, ok := os.LookupEnv(k); ok {
				outside[k] = v
			}
		}
	}
	outsideMu.Unlock()
	for _, k := range proxyVars {
		if err := os.Setenv(k, u); err != nil {
			return err
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "https://probe.proxy-check.svc:6443/", nil)
	got, err := http.ProxyFromEnvironment(req)
	if err != nil {
		return err
	}
	if got == nil || got.String() != u {
		return fmt.Errorf("http.ProxyFromEnvironment answers %v, not %s: the process read its proxy "+
			"environment before Export (call it in TestMain, before any HTTP request), or NO_PROXY "+
			"excludes .svc names", got, u)
	}
	return nil
}

// proxyVars are the variables Export sets.
var proxyVars = []string{"HTTPS_PROXY", "https_proxy"}

// outside holds proxyVars as they were before the first Export (unset ones absent); nil
// until then.
var (
	outsideMu sync.Mutex
	outside   map[string]string
)

// OutsideEnv is the environment for a child process that must reach the outside world
// rather than planes: the go command fetching modules, the test/tools scripts that build
// with it. It is this process's, with the proxy settings it had before Export: the plane
// proxy refuses every address it does not route (502 Bad Gateway), so a module fetch
// through it fails.
func OutsideEnv() []string {
	outsideMu.Lock()
	defer outsideMu.Unlock()
	if outside == nil {
		return os.Environ()
	}
	env := hostproc.EnvWithout(proxyVars...)
	for _, k := range proxyVars {
		if v, ok := outside[k]; ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// Env is the environment a child process (Kamaji) needs to use the proxy.
func (p *PlaneProxy) Env() []string {
	u := p.URL().String()
	return []string{"HTTPS_PROXY=" + u, "https_proxy=" + u, "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost"}
}

func (p *PlaneProxy) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "this test proxy tunnels CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	p.mu.Lock()
	to, ok := p.routes[r.Host]
	p.mu.Unlock()
	if !ok {
		http.Error(w, "no plane is routed at "+r.Host, http.StatusBadGateway)
		return
	}
	upstream, err := net.DialTimeout("tcp", to, 10*time.Second)
	if err != nil {
		http.Error(w, fmt.Sprintf("dialling %s for %s: %v", to, r.Host, err), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = upstream.Close()
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		_ = conn.Close()
		_ = upstream.Close()
		return
	}
	// Each direction half-closes its peer when its source ends; both sockets are closed
	// once both directions are done.
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		// Bytes the client sent after its CONNECT request and that the server already read.
		if n := buf.Reader.Buffered(); n > 0 {
			b, _ := buf.Reader.Peek(n)
			_, _ = upstream.Write(b)
		}
		_, _ = io.Copy(upstream, conn)
		closeWrite(upstream)
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(conn, upstream)
		closeWrite(conn)
	}()
	go func() {
		wg.Wait()
		_ = conn.Close()
		_ = upstream.Close()
	}()
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	_ = c.Close()
}
