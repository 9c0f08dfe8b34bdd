package computeplane

import (
	"strings"
	"testing"

	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func TestProvisioningResult(t *testing.T) {
	infraReady := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: clusterv1.ClusterStatus{
		Conditions: []metav1.Condition{{Type: clusterv1.ClusterInfrastructureReadyCondition, Status: metav1.ConditionTrue}}}}
	initialized := infraReady.DeepCopy()
	initialized.Status.Conditions = append(initialized.Status.Conditions,
		metav1.Condition{Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionTrue})
	infraWaiting := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: clusterv1.ClusterStatus{
		Conditions: []metav1.Condition{{Type: clusterv1.ClusterInfrastructureReadyCondition, Status: metav1.ConditionFalse, Message: "VMs pending"}}}}
	tcp := func(st kamajiv1alpha1.KubernetesVersionStatus, secret string) *kamajiv1alpha1.TenantControlPlane {
		t := &kamajiv1alpha1.TenantControlPlane{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
		t.Status.Kubernetes.Version = kamajiv1alpha1.KubernetesVersion{Version: "v1.33.4", Status: ptr.To(st)}
		t.Status.KubeConfig.Admin.SecretName = secret
		t.Status.ControlPlaneEndpoint = "10.0.0.1:6443"
		return t
	}
	md := func(group string, available, desired *int32) clusterv1.MachineDeployment {
		m := clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"computeplane.cozystack.io/node-group": group}}}
		m.Spec.Replicas = desired
		m.Status.AvailableReplicas = available
		return m
	}
	addon := func(name string, s metav1.ConditionStatus, msg string) helmv2.HelmRelease {
		hr := helmv2.HelmRelease{Spec: helmv2.HelmReleaseSpec{ReleaseName: name}}
		hr.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: s, Message: msg}}
		return hr
	}
	cases := []struct {
		name         string
		obs          providerObservation
		status       metav1.ConditionStatus
		reason, want string
	}{
		{"no cluster yet", providerObservation{}, "False", cpv1.WaitingForInfrastructureReason, "has not picked up"},
		{"no infra condition", providerObservation{cluster: &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "p"}}},
			"False", cpv1.WaitingForInfrastructureReason, "KubevirtCluster p is not ready"},
		{"infra waiting", providerObservation{cluster: infraWaiting}, "False", cpv1.WaitingForInfrastructureReason, "VMs pending"},
		{"no tenant control plane", providerObservation{cluster: infraReady}, "False", cpv1.WaitingForControlPlaneReason, "has not created"},
		{"control plane upgrading", providerObservation{cluster: infraReady, tcp: tcp(kamajiv1alpha1.VersionUpgrading, "")},
			"False", cpv1.WaitingForControlPlaneReason, "is Upgrading"},
		{"Cluster API has not seen the control plane", providerObservation{cluster: infraReady, tcp: tcp(kamajiv1alpha1.VersionReady, "s")},
			"False", cpv1.WaitingForControlPlaneReason, "does not report the control plane of Cluster p initialized"},
		{"no secret name", providerObservation{cluster: initialized, tcp: tcp(kamajiv1alpha1.VersionReady, "")},
			"False", cpv1.WaitingForKubeconfigReason, "names no admin kubeconfig"},
		{"secret without the key", providerObservation{cluster: initialized, tcp: tcp(kamajiv1alpha1.VersionReady, "s"), kubeconfigSecret: "s", kubeconfigMissing: "has no key super-admin.svc yet"},
			"False", cpv1.WaitingForKubeconfigReason, "admin kubeconfig Secret s has no key super-admin.svc"},
		{"kubeconfig refused", providerObservation{cluster: initialized, tcp: tcp(kamajiv1alpha1.VersionReady, "s"), kubeconfigSecret: "s",
			kubeconfigUnusable: "key super-admin.svc sets users[].user.tokenFile"},
			"False", cpv1.KubeconfigUnusableReason, "admin kubeconfig Secret s key super-admin.svc sets users[].user.tokenFile; nothing was sent to the plane"},
		{"up, scale-from-zero group does not block", providerObservation{cluster: initialized, tcp: tcp(kamajiv1alpha1.VersionReady, "s"), kubeconfigSecret: "s",
			machineDeploys: []clusterv1.MachineDeployment{md("workers", ptr.To[int32](2), ptr.To[int32](3)), md("gpu", nil, nil)}},
			"True", cpv1.SucceededReason, "node groups: workers 2 available (of 3), gpu 0 available (of 0); no add-ons"},
		{"add-on readiness is reported", providerObservation{cluster: initialized, tcp: tcp(kamajiv1alpha1.VersionReady, "s"), kubeconfigSecret: "s",
			addons: []helmv2.HelmRelease{addon("cilium", metav1.ConditionTrue, ""), addon("ingress", metav1.ConditionFalse, "install retries exhausted")}},
			"True", cpv1.SucceededReason, "add-ons: cilium ready, ingress not ready: install retries exhausted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := provisioningResult(&tc.obs)
			if r.status != tc.status || r.reason != tc.reason || !strings.Contains(r.message, tc.want) {
				t.Errorf("got %s/%s %q, want %s/%s containing %q", r.status, r.reason, r.message, tc.status, tc.reason, tc.want)
			}
			if r.terminal {
				t.Error("waiting on providers must not stall the plane")
			}
		})
	}
}

func TestEndpointHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:6443":     "10.0.0.1:6443",
		"fd00:10::1:6443":   "[fd00:10::1]:6443", // Kamaji v1.0.0's unbracketed IPv6
		"[fd00:10::1]:6443": "[fd00:10::1]:6443",
		"plane.example:443": "plane.example:443",
		"":                  "",
		"not an endpoint":   "not an endpoint",
	} {
		if got := endpointHostPort(in); got != want {
			t.Errorf("endpointHostPort(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestControlPlaneServers(t *testing.T) {
	tcp := &kamajiv1alpha1.TenantControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: "cp-a-1234", Name: "p"}}
	tcp.Status.ControlPlaneEndpoint = "10.0.0.1:6443"
	got := strings.Join(controlPlaneServers(tcp), " ")
	if want := "https://10.0.0.1:6443 https://p.cp-a-1234.svc:6443 https://p.cp-a-1234.svc.cluster.local:6443"; got != want {
		t.Errorf("servers = %s, want %s", got, want)
	}
	tcp.Status.ControlPlaneEndpoint = ""
	tcp.Spec.NetworkProfile.Port = 443
	if got := strings.Join(controlPlaneServers(tcp), " "); got != "https://p.cp-a-1234.svc:443 https://p.cp-a-1234.svc.cluster.local:443" {
		t.Errorf("servers without an endpoint = %s", got)
	}
}
