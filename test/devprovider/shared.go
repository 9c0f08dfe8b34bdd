package devprovider

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/internal/devenv"
)

// A shared tenant apiserver and the planes it serves (Provider.Shared).
//
// Planes of one class do not write identical objects into their planes: every object
// the operator applies there carries the plane's labels (its name, namespace and UID),
// and the plane's tenant namespace is one of its placement namespaces (with the deployer
// ServiceAccount and its RBAC). Planes pointed at one apiserver as they are would fight
// over the labels of the cluster-scoped objects (the admission policies, the operator's
// namespace, the applier ServiceAccount), each seeing the others' writes as drift, and
// each would cache every other plane's namespaces and identities. So every plane reaches
// its shared apiserver through a view of its own: a reverse proxy on loopback that
// rewrites the plane's tenant namespace and UID into those of the first plane the
// apiserver served (the group's canonical plane) on the way in, and back on the way out
// (paths, queries, bodies, watch streams). Through its view every plane of a group sees
// exactly what the canonical plane sees, and writes exactly what it writes: the same
// names, content and field owner, so server-side apply from many planes converges.
type sharedServer struct {
	tenant *devenv.Cluster
	// upstream reaches the apiserver as its super-admin (system:masters), the identity
	// the planes' admin kubeconfigs name; impersonation headers pass through.
	upstream  *url.URL
	transport http.RoundTripper
	// canonical is the plane every view maps to; set by the first plane served.
	canonical *planeIdentity
}

// planeIdentity is what the operator writes into a plane that differs between planes.
type planeIdentity struct {
	name, namespace, uid string
}

func identityOf(kcp *unstructured.Unstructured) (*planeIdentity, error) {
	l := kcp.GetLabels()
	id := &planeIdentity{name: l[cpv1.PlaneNameLabel], namespace: l[cpv1.PlaneNamespaceLabel], uid: l[cpv1.PlaneUIDLabel]}
	if id.name == "" || id.namespace == "" || id.uid == "" {
		return nil, fmt.Errorf("KamajiControlPlane %s/%s carries no ComputePlane labels: shared mode serves only the operator's planes",
			kcp.GetNamespace(), kcp.GetName())
	}
	return id, nil
}

// view is one plane's endpoint onto its shared apiserver.
type view struct {
	group  int
	server *httptest.Server
	caPEM  []byte
}

func (v *view) close() {
	v.server.CloseClientConnections()
	v.server.Close()
}

func startShared(o devenv.TenantOptions, p *Provider) (*sharedServer, error) {
	tenant, err := devenv.StartTenantWith(p.Scheme, o)
	if err != nil {
		return nil, err
	}
	user, err := tenant.Env.ControlPlane.AddUser(envtest.User{Name: "kubernetes-super-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = tenant.Stop()
		return nil, err
	}
	cfg := user.Config()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		_ = tenant.Stop()
		return nil, err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		_ = tenant.Stop()
		return nil, err
	}
	return &sharedServer{tenant: tenant, upstream: u, transport: rt}, nil
}

// newView starts the plane's view: TLS with HTTP/2 on loopback, as a Kamaji endpoint
// serves, so the operator keeps one multiplexed connection per plane.
func (s *sharedServer) newView(group int, id *planeIdentity) (*view, error) {
	c := s.canonical
	if id.name != c.name {
		return nil, fmt.Errorf("plane %s/%s cannot share an apiserver with %s/%s: shared planes must have the same name",
			id.namespace, id.name, c.namespace, c.name)
	}
	// Same lengths keep every Content-Length and protobuf request body valid.
	if len(id.namespace) != len(c.namespace) {
		return nil, fmt.Errorf("plane namespace %q and the shared apiserver's %q differ in length: use fixed-width names",
			id.namespace, c.namespace)
	}
	in := newReplacer(id.namespace, c.namespace, id.uid, c.uid)
	out := newReplacer(c.namespace, id.namespace, c.uid, id.uid)
	rp := &httputil.ReverseProxy{
		Transport:     s.transport,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(s.upstream)
			u := pr.Out.URL
			u.Path, u.RawPath, u.RawQuery = in.string(u.Path), in.string(u.RawPath), in.string(u.RawQuery)
			// Responses are rewritten as they stream; JSON frames end in a newline, so a
			// watch event is never held back waiting for the next one.
			pr.Out.Header.Del("Accept-Encoding")
			pr.Out.Header.Set("Accept", withoutProtobuf(pr.Out.Header.Get("Accept")))
			if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
				data, err := io.ReadAll(pr.Out.Body)
				_ = pr.Out.Body.Close()
				if err == nil {
					pr.Out.Body = io.NopCloser(bytes.NewReader(in.bytes(data)))
				} else {
					pr.Out.Body = io.NopCloser(errReader{err})
				}
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Body = &replacingReader{src: resp.Body, r: out}
			return nil
		},
	}
	srv := httptest.NewUnstartedServer(rp)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return &view{group: group, server: srv, caPEM: ca}, nil
}

// withoutProtobuf drops the protobuf media types of an Accept header (the views rewrite
// JSON); what is left, or application/json, is asked for.
func withoutProtobuf(accept string) string {
	var keep []string
	for _, t := range strings.Split(accept, ",") {
		if t = strings.TrimSpace(t); t != "" && !strings.Contains(t, "protobuf") {
			keep = append(keep, t)
		}
	}
	if len(keep) == 0 {
		return "application/json"
	}
	return strings.Join(keep, ",")
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// replacer swaps strings of equal length (a plane's namespace and UID for another's).
type replacer struct{ old, new [][]byte }

func newReplacer(pairs ...string) *replacer {
	r := &replacer{}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i] != pairs[i+1] {
			r.old, r.new = append(r.old, []byte(pairs[i])), append(r.new, []byte(pairs[i+1]))
		}
	}
	return r
}

func (r *replacer) bytes(b []byte) []byte {
	for i := range r.old {
		b = bytes.ReplaceAll(b, r.old[i], r.new[i])
	}
	return b
}

func (r *replacer) string(s string) string { return string(r.bytes([]byte(s))) }

// partial is the length of the longest suffix of b that is a proper prefix of an old
// string: it may complete in the next read, so it is held back.
func (r *replacer) partial(b []byte) int {
	longest := 0
	for _, o := range r.old {
		for k := min(len(o)-1, len(b)); k > longest; k-- {
			if bytes.HasSuffix(b, o[:k]) {
				longest = k
				break
			}
		}
	}
	return longest
}

// replacingReader rewrites a streamed body as it is read, holding back only a tail that
// may be the start of a string to replace.
type replacingReader struct {
	src   io.ReadCloser
	r     *replacer
	carry []byte
	out   []byte
	err   error
	buf   []byte
}

func (rr *replacingReader) Read(p []byte) (int, error) {
	for len(rr.out) == 0 {
		if rr.err != nil {
			return 0, rr.err
		}
		if rr.buf == nil {
			rr.buf = make([]byte, 32<<10)
		}
		n, err := rr.src.Read(rr.buf)
		data := append(rr.carry, rr.buf[:n]...)
		rr.carry = nil
		keep := 0
		if err == nil {
			keep = rr.r.partial(data)
		}
		rr.err = err
		rr.carry = append([]byte(nil), data[len(data)-keep:]...)
		rr.out = rr.r.bytes(data[:len(data)-keep])
	}
	n := copy(p, rr.out)
	rr.out = rr.out[n:]
	return n, nil
}

func (rr *replacingReader) Close() error { return rr.src.Close() }

// pointAt rewrites every kubeconfig of an admin kubeconfig Secret to reach server with
// the view's CA; the client certificate stays the apiserver's super-admin.
func pointAt(secret *corev1.Secret, server string, caPEM []byte) error {
	for k, data := range secret.Data {
		cfg, err := clientcmd.Load(data)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		for _, c := range cfg.Clusters {
			c.Server, c.CertificateAuthorityData = server, caPEM
		}
		if secret.Data[k], err = clientcmd.Write(*cfg); err != nil {
			return err
		}
	}
	return nil
}

// sharedFor returns the plane's view and its apiserver, starting them on first sight:
// planes are assigned round-robin in the order the provider first sees them, and the
// apiservers are started lazily. The caller holds p.mu.
func (p *Provider) sharedFor(key types.NamespacedName, id *planeIdentity) (*view, *sharedServer, error) {
	if v := p.views[key]; v != nil {
		return v, p.pool[v.group], nil
	}
	group := p.seen % p.Shared
	if len(p.pool) <= group {
		s, err := startShared(p.TenantOptions, p)
		if err != nil {
			return nil, nil, fmt.Errorf("starting shared tenant apiserver %d: %w", group, err)
		}
		p.pool = append(p.pool, s)
	}
	s := p.pool[group]
	if s.canonical == nil {
		s.canonical = id
	}
	v, err := s.newView(group, id)
	if err != nil {
		return nil, nil, err
	}
	p.seen++
	if p.views == nil {
		p.views = map[types.NamespacedName]*view{}
	}
	p.views[key] = v
	return v, s, nil
}
