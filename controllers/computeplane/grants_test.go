package computeplane

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func TestDecideGrant(t *testing.T) {
	p := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "plane"}}
	strict := &cpv1.ComputePlaneClass{}
	lenient := &cpv1.ComputePlaneClass{Spec: cpv1.ComputePlaneClassSpec{Egress: cpv1.EgressProfile{AllowSelectorlessServices: true}}}
	req := cpv1.ServiceAccess{Name: "db", Ports: []cpv1.ServicePort{{Port: 5432, Protocol: "TCP"}}}
	svc := func(mut func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "db", Labels: map[string]string{cpv1.ServiceAccessLabel: "plane"}},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "db"},
				Ports: []corev1.ServicePort{{Port: 5432, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("postgres")}}}}
		if mut != nil {
			mut(s)
		}
		return s
	}
	cases := []struct {
		name   string
		class  *cpv1.ComputePlaneClass
		svc    *corev1.Service
		state  cpv1.GrantState
		msg    string
		target string
	}{
		{"granted, to the named target port", strict, svc(nil), cpv1.GrantGranted, "5432/TCP→postgres", "postgres"},
		{"granted, numeric target", strict, svc(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(15432) }), cpv1.GrantGranted, "→15432", "15432"},
		{"granted, no target: the port", strict, svc(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.IntOrString{} }), cpv1.GrantGranted, "→5432", "5432"},
		{"missing", strict, nil, cpv1.GrantPending, "does not exist", ""},
		{"not opted in", strict, svc(func(s *corev1.Service) { s.Labels = nil }), cpv1.GrantPending, "has not opted in", ""},
		{"opted in for another plane", strict, svc(func(s *corev1.Service) { s.Labels[cpv1.ServiceAccessLabel] = "other" }), cpv1.GrantPending, "has not opted in", ""},
		{"ExternalName", strict, svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }), cpv1.GrantRefused, "ExternalName", ""},
		{"no selector", strict, svc(func(s *corev1.Service) { s.Spec.Selector = nil }), cpv1.GrantRefused, "has no selector", ""},
		{"no selector, allowed by the class", lenient, svc(func(s *corev1.Service) { s.Spec.Selector = nil }), cpv1.GrantGranted, "5432/TCP", "postgres"},
		{"a selector naming another namespace", strict, svc(func(s *corev1.Service) {
			s.Spec.Selector["io.kubernetes.pod.namespace"] = "tenant-b"
		}), cpv1.GrantRefused, "more than a pod label", ""},
		{"a port the Service does not expose", strict, svc(func(s *corev1.Service) { s.Spec.Ports[0].Port = 5433 }), cpv1.GrantRefused, "does not expose 5432/TCP (it exposes 5433/TCP)", ""},
		{"the right port, another protocol", strict, svc(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolUDP }), cpv1.GrantRefused, "does not expose 5432/TCP", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, g := decideGrant(p, tc.class, req, tc.svc)
			if st.State != tc.state || !strings.Contains(st.Message, tc.msg) {
				t.Fatalf("%s %q, want %s containing %q", st.State, st.Message, tc.state, tc.msg)
			}
			if (g != nil) != (tc.state == cpv1.GrantGranted) {
				t.Fatalf("grant %+v for state %s", g, tc.state)
			}
			if g != nil && (g.Namespace != "tenant-a" || len(g.Ports) != 1 || g.Ports[0].Port != tc.target || g.Ports[0].Protocol != "TCP") {
				t.Errorf("grant = %+v, want namespace tenant-a and port %s/TCP", g, tc.target)
			}
		})
	}
}
