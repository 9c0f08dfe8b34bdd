package placement

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRouteRelease(t *testing.T) {
	r := placementRoute{namespace: "tenant-a", secret: "p-applier-kubeconfig", targets: []string{"notebooks", "tenant-a"}}
	cases := []struct {
		name, in string
		want     []string // substrings of the routing errors after routing; none: routed
	}{
		{"left out: filled in", `{"spec": {"chartRef": {"kind": "OCIRepository", "name": "x"}}}`, nil},
		{"a placement namespace kept", `{"spec": {"targetNamespace": "notebooks"}}`, nil},
		{"the required values, written out", `{"spec": {"kubeConfig": {"secretRef": {"name": "p-applier-kubeconfig", "key": "value"}},
			"serviceAccountName": "computeplane-deployer", "targetNamespace": "tenant-a", "storageNamespace": "tenant-a",
			"install": {"createNamespace": false}}}`, nil},
		{"another Secret", `{"spec": {"kubeConfig": {"secretRef": {"name": "admin", "key": "value"}}}}`, []string{"spec.kubeConfig"}},
		{"a Secret without its key", `{"spec": {"kubeConfig": {"secretRef": {"name": "p-applier-kubeconfig"}}}}`, []string{"spec.kubeConfig"}},
		{"workload identity", `{"spec": {"kubeConfig": {"configMapRef": {"name": "mgmt"}}}}`, []string{"spec.kubeConfig"}},
		{"both", `{"spec": {"kubeConfig": {"secretRef": {"name": "p-applier-kubeconfig", "key": "value"}, "configMapRef": {"name": "mgmt"}}}}`, []string{"spec.kubeConfig"}},
		{"another identity", `{"spec": {"serviceAccountName": "admin"}}`, []string{"spec.serviceAccountName"}},
		{"outside the plane's namespaces", `{"spec": {"targetNamespace": "kube-system"}}`, []string{`spec.targetNamespace: Unsupported value: "kube-system"`}},
		{"records elsewhere", `{"spec": {"storageNamespace": "kube-system"}}`, []string{"spec.storageNamespace"}},
		{"creating namespaces", `{"spec": {"install": {"createNamespace": true}}}`, []string{"spec.install.createNamespace"}},
		{"post-renderers", `{"spec": {"postRenderers": [{"kustomize": {}}]}}`, []string{"spec.postRenderers"}},
		{"everything kept past the uninstall", `{"spec": {"commonMetadata": {"annotations": {"helm.sh/resource-policy": "keep"}}}}`, []string{"spec.commonMetadata.annotations[helm.sh/resource-policy]"}},
		{"hooks left unlabelled", `{"spec": {"postRenderStrategy": "nohooks"}}`, []string{`spec.postRenderStrategy: Unsupported value: "nohooks"`}},
		{"hooks post-rendered apart", `{"spec": {"postRenderStrategy": "separate"}}`, nil},
		{"common labels", `{"spec": {"commonMetadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}}}}`, nil},
		{"several", `{"spec": {"serviceAccountName": "admin", "postRenderers": [{}]}}`, []string{"spec.serviceAccountName", "spec.postRenderers"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := obj(t, tc.in)
			routeRelease(o, r)
			errs := routingErrors(o, r)
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d", errs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want %q", i, errs[i], w)
				}
			}
		})
	}
}

func TestIsPlacement(t *testing.T) {
	a := obj(t, `{"metadata": {"labels": {"computeplane.cozystack.io/placement": "ComputePlane"}}, "spec": {"targetNamespace": "x", "values": {"a": 1}}}`)
	c := obj(t, `{"metadata": {"labels": {"computeplane.cozystack.io/placement": "Management"}}, "spec": {"targetNamespace": "y"}}`)
	if !isPlacement(a) || isPlacement(c) {
		t.Error("only the label's value ComputePlane marks a placement release")
	}
}

func TestPlacementCondition(t *testing.T) {
	cases := []struct {
		gate   gate
		counts cpv1.PlacementCounts
		status metav1.ConditionStatus
		reason string
		msg    []string
	}{
		{gate{open: true}, cpv1.PlacementCounts{Routed: 3}, metav1.ConditionTrue, cpv1.RoutedReason, []string{"3 placement release(s) routed"}},
		{gate{why: "ComputePlane p is not Ready (Drifted: ...)"}, cpv1.PlacementCounts{Held: 2, Uninstalling: 1}, metav1.ConditionFalse, cpv1.HeldReason,
			[]string{"2 placement release(s) held: ComputePlane p is not Ready", "1 deleted, waiting to be uninstalled"}},
		{gate{open: true}, cpv1.PlacementCounts{Routed: 1, Refused: 1}, metav1.ConditionTrue, cpv1.RoutedReason, []string{"1 labelled for placement but not routed"}},
	}
	for i, tc := range cases {
		c := placementCondition(tc.gate, tc.counts)
		if c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("%d: %s/%s, want %s/%s", i, c.Status, c.Reason, tc.status, tc.reason)
		}
		for _, m := range tc.msg {
			if !strings.Contains(c.Message, m) {
				t.Errorf("%d: message %q lacks %q", i, c.Message, m)
			}
		}
	}
}

// TestRoutingFillsInThePostRenderStrategy: a release that names no strategy gets
// Flux's combined one, whatever the helm-controller's defaults, so its hooks carry the
// origin labels its leftovers are found by.
func TestRoutingFillsInThePostRenderStrategy(t *testing.T) {
	r := placementRoute{namespace: "tenant-a", secret: "p-applier-kubeconfig", targets: []string{"tenant-a"}}
	o := obj(t, `{"spec": {}}`)
	routeRelease(o, r)
	if got := nested(o, "spec", "postRenderStrategy"); got != "combined" {
		t.Errorf("postRenderStrategy = %v, want combined", got)
	}
	o = obj(t, `{"spec": {"postRenderStrategy": "separate"}}`)
	routeRelease(o, r)
	if got := nested(o, "spec", "postRenderStrategy"); got != "separate" {
		t.Errorf("postRenderStrategy = %v, want the release's own separate", got)
	}
}
