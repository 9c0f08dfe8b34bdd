package cilium_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	slim_metav1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	"github.com/cilium/cilium/pkg/policy/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/internal/devenv/cilium"
)

// TestNodePolicesItsPods: pods of the node get addresses from the real agent, reach each
// other directly and through a Service's ClusterIP (Cilium's own translation, over the
// EndpointSlice the real controller-manager wrote), until a CiliumNetworkPolicy selects
// the client: then its packets are dropped, and the agent counts them.
func TestNodePolicesItsPods(t *testing.T) {
	bin, err := devenv.CiliumBinaries()
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = ciliumv2.AddToScheme(scheme)
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: scheme, Bare: true, Cilium: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgmt.Stop() })
	started := time.Now()
	node, err := devenv.StartCiliumNode(ctx, mgmt, bin, filepath.Join(t.TempDir(), "node"))
	if errors.Is(err, cilium.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent:\n%s", node.AgentLog(80))
		}
		node.Close()
	})
	t.Logf("cilium-agent healthy: %s", time.Since(started).Round(time.Millisecond))
	k8s := mgmt.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "pods"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	server, err := node.RunPod(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "pods", Name: "server", Labels: map[string]string{"app": "server"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Listen(8080, "server"); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "pods", Name: "server"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "server"},
		Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	if err := k8s.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	podStarted := time.Now()
	clientPod, err := node.RunPod(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "pods", Name: "client", Labels: map[string]string{"app": "client"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod plumbed by cilium-cni: %s (%s)", time.Since(podStarted).Round(time.Millisecond), clientPod.IP())
	direct := net.JoinHostPort(server.IP(), "8080")
	viaService := net.JoinHostPort(svc.Spec.ClusterIP, "80")
	for _, addr := range []string{direct, viaService} {
		poll(t, 30*time.Second, func() error {
			got, err := cilium.Reach(ctx, clientPod.Netns(), addr)
			if err != nil || got != "server" {
				return errors.New("client → " + addr + ": " + got + " " + errString(err))
			}
			return nil
		})
	}

	before, err := node.Drops(ctx, cilium.DropPolicyDenied, "EGRESS")
	if err != nil {
		t.Fatal(err)
	}
	cnp := &ciliumv2.CiliumNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "pods", Name: "client-to-world-only"}, Spec: &api.Rule{
		EndpointSelector: api.EndpointSelector{LabelSelector: &slim_metav1.LabelSelector{MatchLabels: map[string]string{"k8s:app": "client"}}},
		Egress:           []api.EgressRule{{EgressCommonRule: api.EgressCommonRule{ToEntities: api.EntitySlice{api.EntityWorld}}}},
	}}
	if err := k8s.Create(ctx, cnp); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	for _, addr := range []string{direct, viaService} {
		poll(t, 30*time.Second, func() error {
			_, err := cilium.Reach(ctx, clientPod.Netns(), addr)
			var ne net.Error
			if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
				return errors.New("client → " + addr + " is not dropped: " + errString(err))
			}
			return nil
		})
	}
	t.Logf("policy created → enforced: %s", time.Since(applied).Round(time.Millisecond))
	after, err := node.Drops(ctx, cilium.DropPolicyDenied, "EGRESS")
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("the agent counted no policy drop (%v before, %v after)", before, after)
	}
	if err := clientPod.Delete(ctx); err != nil {
		t.Error(err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "pods", Name: "client"}, &corev1.Pod{}); err == nil {
		t.Error("the deleted pod's object is still there")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func poll(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
