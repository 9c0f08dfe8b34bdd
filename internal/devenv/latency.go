package devenv

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// latencyProxy forwards TCP connections to an apiserver and holds back each chunk a
// client sends by the current latency: a plane that answers every request slowly (a
// loaded control plane, a long network path), with TLS passing through untouched, so the
// client still verifies the apiserver itself.
type latencyProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func startLatencyProxy(target string) (*latencyProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &latencyProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *latencyProxy) addr() string { return p.ln.Addr().String() }

func (p *latencyProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(in)
		}()
	}
}

func (p *latencyProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *latencyProxy) forward(in net.Conn) {
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = in.Close()
		return
	}
	p.track(in, true)
	p.track(out, true)
	defer func() {
		_ = in.Close()
		_ = out.Close()
		p.track(in, false)
		p.track(out, false)
	}()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(in, out)
		done <- struct{}{}
	}()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				if d := time.Duration(p.delay.Load()); d > 0 {
					time.Sleep(d)
				}
				if _, werr := out.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
}

func (p *latencyProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// ErrNoLatencyProxy is returned by SetLatency on a cluster started without
// TenantOptions.Latency.
var ErrNoLatencyProxy = errors.New("devenv: the cluster was started without TenantOptions.Latency")

// SetLatency holds back every chunk a client sends to the cluster's apiserver by d from
// now on (0: none), on connections open already too.
func (c *Cluster) SetLatency(d time.Duration) error {
	if c.latency == nil {
		return ErrNoLatencyProxy
	}
	c.latency.delay.Store(int64(d))
	return nil
}
