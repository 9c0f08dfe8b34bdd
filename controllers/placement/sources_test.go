package placement

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/tenancy"
)

// TestHelmReleaseFieldsAreJudged goes through Flux's HelmRelease v2 API field by field
// (every field that names a Secret, a ConfigMap, a namespace or an identity; README's
// threat model lists the same table) and checks what a placement release and an
// unlabelled release in a plane's namespace may put there.
func TestHelmReleaseFieldsAreJudged(t *testing.T) {
	plane := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "plane"}}
	creds := "plane-applier-kubeconfig"
	cases := []struct {
		field string
		spec  string
		// want is what a placement release gets ("" allowed), unlabelled what any other
		// HelmRelease gets.
		want, unlabelled string
	}{
		{"kubeConfig.secretRef (the routing)", `{"kubeConfig":{"secretRef":{"name":"` + creds + `","key":"value"}}}`,
			"", "names ComputePlane plane's applier kubeconfig: only a placement release is applied with it"},
		{"kubeConfig.secretRef (another Secret)", `{"kubeConfig":{"secretRef":{"name":"mine","key":"value"}}}`,
			"spec.kubeConfig: Invalid value", ""},
		{"kubeConfig.secretRef.key", `{"kubeConfig":{"secretRef":{"name":"` + creds + `","key":"admin"}}}`,
			"spec.kubeConfig: Invalid value", "only a placement release is applied with it"},
		{"kubeConfig.configMapRef", `{"kubeConfig":{"configMapRef":{"name":"workload-identity"}}}`,
			"spec.kubeConfig: Invalid value", ""},
		{"valuesFrom Secret (the credential)", `{"valuesFrom":[{"kind":"Secret","name":"` + creds + `","valuesKey":"value"}]}`,
			"spec.valuesFrom[0].name: Forbidden: names ComputePlane plane's applier kubeconfig: the plane's credential never feeds",
			"spec.valuesFrom[0].name: Forbidden: names ComputePlane plane's applier kubeconfig"},
		{"valuesFrom ConfigMap named like it", `{"valuesFrom":[{"kind":"ConfigMap","name":"` + creds + `"}]}`,
			"spec.valuesFrom[0].name: Forbidden", "spec.valuesFrom[0].name: Forbidden"},
		{"valuesFrom the tenant's own Secret", `{"valuesFrom":[{"kind":"Secret","name":"app-values"}]}`, "", ""},
		{"a field this build does not know", `{"futureRef":{"secretName":"` + creds + `"}}`,
			"spec.futureRef.secretName: Forbidden", "spec.futureRef.secretName: Forbidden"},
		{"postRenderers", `{"postRenderers":[{"kustomize":{"patches":[{"patch":"x"}]}}]}`, "spec.postRenderers: Forbidden", ""},
		{"values naming it (applied in the plane only)", `{"values":{"secretName":"` + creds + `"}}`, "", ""},
		{"chartRef in its own namespace", `{"chartRef":{"kind":"OCIRepository","name":"app","namespace":"tenant-a"}}`, "", ""},
		{"chartRef in another tenant's namespace", `{"chartRef":{"kind":"OCIRepository","name":"private","namespace":"tenant-b"}}`,
			`spec.chartRef.namespace: Unsupported value: "tenant-b": supported values: "tenant-a", "cozy-public"`, ""},
		{"chartRef in a source namespace the class lists", `{"chartRef":{"kind":"OCIRepository","name":"app","namespace":"cozy-public"}}`, "", ""},
		{"chart.spec.sourceRef in another tenant's namespace", `{"chart":{"spec":{"chart":"app","sourceRef":{"kind":"HelmRepository","name":"private","namespace":"tenant-b"}}}}`,
			`spec.chart.spec.sourceRef.namespace: Unsupported value: "tenant-b"`, ""},
		{"chart.spec.verify.secretRef (read in the source's namespace)", `{"chart":{"spec":{"chart":"app","sourceRef":{"kind":"HelmRepository","name":"r"},"verify":{"provider":"cosign","secretRef":{"name":"keys"}}}}}`, "", ""},
		{"dependsOn another namespace", `{"dependsOn":[{"name":"db","namespace":"tenant-b"}]}`,
			`spec.dependsOn[0].namespace: Unsupported value: "tenant-b": supported values: "tenant-a"`, ""},
		{"dependsOn its own namespace", `{"dependsOn":[{"name":"db"}]}`, "", ""},
		{"serviceAccountName", `{"serviceAccountName":"default"}`, `spec.serviceAccountName: Unsupported value: "default"`, ""},
		{"targetNamespace", `{"targetNamespace":"kube-system"}`, `spec.targetNamespace: Unsupported value: "kube-system"`, ""},
		{"storageNamespace", `{"storageNamespace":"kube-system"}`, `spec.storageNamespace: Unsupported value: "kube-system"`, ""},
		{"install.createNamespace", `{"install":{"createNamespace":true}}`, "spec.install.createNamespace: Forbidden", ""},
		{"commonMetadata (labels in the plane, held by its policies)", `{"commonMetadata":{"labels":{"a":"b"}}}`, "", ""},
		{"releaseName", `{"releaseName":"other"}`, "", ""},
		{"uninstall.deletionPropagation orphan", `{"uninstall":{"deletionPropagation":"orphan"}}`,
			`spec.uninstall.deletionPropagation: Unsupported value: "orphan": supported values: "background", "foreground"`, ""},
		{"uninstall.deletionPropagation foreground", `{"uninstall":{"deletionPropagation":"foreground"}}`, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			var spec map[string]any
			if err := jsonUnmarshal(tc.spec, &spec); err != nil {
				t.Fatal(err)
			}
			placement := map[string]any{"metadata": map[string]any{"labels": map[string]any{cpv1.PlacementLabel: cpv1.PlacementLabelValue}}, "spec": spec}
			routeRelease(placement, routeFor(plane))
			got := placementErrors(placement, plane, cpv1.PlacementReleasePolicy{SourceNamespaces: []string{"cozy-public"}}).ToAggregate()
			expect(t, "placement release", got, tc.want)

			var unrouted map[string]any // routeRelease filled in the placement release's spec
			if err := jsonUnmarshal(tc.spec, &unrouted); err != nil {
				t.Fatal(err)
			}
			other := map[string]any{"spec": unrouted}
			expect(t, "unlabelled release", tenancy.CredentialErrors("HelmRelease", false, tenancy.SuspectNames(other), []cpv1.ComputePlane{*plane}).ToAggregate(), tc.unlabelled)
		})
	}
}

func expect(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s refused: %v", what, err)
	case want != "" && err == nil:
		t.Errorf("%s accepted; want %q", what, want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("%s refused with %q; want %q", what, err, want)
	}
}

// TestUpdatesAreJudgedForWhatTheyIntroduce: an update keeps what was stored before a rule
// existed (Flux's and the operator's writes go through) but adds nothing new; resuming a
// release, and a deleted release's spec, are judged whole.
func TestUpdatesAreJudgedForWhatTheyIntroduce(t *testing.T) {
	plane := &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "plane"}}
	release := func(spec string) map[string]any {
		var s map[string]any
		if err := jsonUnmarshal(spec, &s); err != nil {
			t.Fatal(err)
		}
		obj := map[string]any{"spec": s}
		routeRelease(obj, routeFor(plane))
		return obj
	}
	stored := release(`{"suspend":true,"chartRef":{"kind":"OCIRepository","name":"app","namespace":"tenant-b"}}`)
	valuesEdited := release(`{"suspend":true,"values":{"a":1},"chartRef":{"kind":"OCIRepository","name":"app","namespace":"tenant-b"}}`)
	moved := release(`{"suspend":true,"chartRef":{"kind":"OCIRepository","name":"app","namespace":"tenant-c"}}`)
	resumed := release(`{"chartRef":{"kind":"OCIRepository","name":"app","namespace":"tenant-b"}}`)

	if errs := newErrors(placementErrors(valuesEdited, plane, cpv1.PlacementReleasePolicy{}), placementErrors(stored, plane, cpv1.PlacementReleasePolicy{})); len(errs) > 0 {
		t.Errorf("an edit that keeps a stored source was refused: %v", errs)
	}
	if errs := newErrors(placementErrors(moved, plane, cpv1.PlacementReleasePolicy{}), placementErrors(stored, plane, cpv1.PlacementReleasePolicy{})); len(errs) != 1 {
		t.Errorf("moving to another foreign source: %v, want one new error", errs)
	}
	if !unsuspends(stored, resumed) || unsuspends(resumed, stored) || unsuspends(stored, valuesEdited) {
		t.Error("unsuspends does not tell a resumption")
	}
	if !onlySuspendChanged(stored, resumed) || onlySuspendChanged(stored, valuesEdited) {
		t.Error("onlySuspendChanged does not tell a suspension alone")
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
