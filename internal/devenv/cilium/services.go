package cilium

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cozystack/computeplane/internal/devenv/netns"
)

// ClusterDNSIP is the kube-dns Service's ClusterIP (envtest's Service range is
// 10.0.0.0/24; kubeadm's convention is the range's tenth address).
const ClusterDNSIP = "10.0.0.10"

// ServeClusterDNS runs the cluster DNS as a pod of the node, kube-system/kube-dns labelled
// k8s-app=kube-dns as CoreDNS's is (the operator's baseline allows exactly those pods on
// port 53), behind the kube-dns Service at ClusterDNSIP; lookup answers
// <service>.<namespace>.svc.cluster.local. It returns the Service's address.
func (n *Node) ServeClusterDNS(ctx context.Context, lookup func(service, namespace string) (string, bool)) (string, error) {
	labels := map[string]string{"k8s-app": "kube-dns"}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns", Labels: labels},
		Spec: corev1.ServiceSpec{ClusterIP: ClusterDNSIP, Selector: labels, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
		}}}
	if err := n.o.Client.Create(ctx, svc); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating the kube-dns Service: %w", err)
	}
	p, err := n.RunPod(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-computeplane", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "coredns", Image: "registry.k8s.io/coredns/coredns",
			Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP}}}}}})
	if err != nil {
		return "", err
	}
	dns, err := netns.ServeDNS(p.Netns(), p.IP()+":53", lookup)
	if err != nil {
		_ = p.Delete(context.WithoutCancel(ctx))
		return "", err
	}
	p.Serve(closerFunc(func() error { dns.Close(); return nil }))
	return ClusterDNSIP, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// Forward makes the pod's ports forwarders: a connection to <pod IP>:<port> is piped to
// the address resolve gives for the port when it arrives (a host process standing for the
// pod's container), or closed when it gives none. The pod's container ports name them,
// so the Services that select it have endpoints.
func (p *Pod) Forward(ports []int, resolve func(port int) (string, bool)) error {
	for _, port := range ports {
		l, err := netns.Listen(p.netns, net.JoinHostPort(p.ip, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		p.Serve(serveForwards(l, func() (string, bool) { return resolve(port) }))
	}
	return nil
}

// Listen answers every connection to <pod IP>:<port> with banner, then closes it: a
// backend whose reply says which one was reached.
func (p *Pod) Listen(port int, banner string) error {
	l, err := netns.Listen(p.netns, net.JoinHostPort(p.ip, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	p.Serve(serveBanner(l, banner))
	return nil
}

// serveForwards pipes each accepted connection to to().
func serveForwards(l net.Listener, to func() (string, bool)) io.Closer {
	return serve(l, func(c net.Conn) {
		addr, ok := to()
		if !ok {
			_ = c.Close()
			return
		}
		up, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			_ = c.Close()
			return
		}
		netns.Splice(c, up)
	})
}

// serveBanner writes banner to each accepted connection and closes it.
func serveBanner(l net.Listener, banner string) io.Closer {
	return serve(l, func(c net.Conn) {
		_, _ = io.WriteString(c, banner+"\n")
		_ = c.Close()
	})
}

// serve hands each accepted connection to handle, on a goroutine of its own, until the
// returned closer closes the listener.
func serve(l net.Listener, handle func(net.Conn)) io.Closer {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return closerFunc(func() error { err := l.Close(); wg.Wait(); return err })
}
