package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/placement"
)

// TestAttackAdmissionAsAWeapon: the placement webhooks judge every tenant's Flux
// objects with failurePolicy Fail, so what one tenant makes them do, every tenant waits
// on. A tenant (the tenant roles and Flux's aggregated edit) sends, with
// --dry-run=server so nothing is stored: a release whose spec (values aside) is past
// what admission decodes; one naming more applier-kubeconfig-shaped Secrets than
// admission looks up (a read each, as the operator); placement releases that would keep
// Flux's shared controllers busy (an interval of 1s, an hour-long timeout, retries
// forever) or fill the plane's shared data store (every Helm revision kept). Each was
// accepted before. A release with 2 MiB of values is still admitted, routed by the
// webhook's field patch, its values untouched: values are never judged.
func TestAttackAdmissionAsAWeapon(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := planeWithClass(t, ctx, newClass("weapon-"+rand.String(6)))
	mallory := fluxTenant(t, ctx, p.Namespace, "mallory-"+rand.String(4))

	release := func(name string, placement bool, mut func(*helmv2.HelmRelease)) *helmv2.HelmRelease {
		hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: name},
			Spec: helmv2.HelmReleaseSpec{Interval: metav1.Duration{Duration: time.Hour},
				ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "app"}}}
		if placement {
			hr.Labels = map[string]string{cpv1.PlacementLabel: cpv1.PlacementLabelValue}
		}
		mut(hr)
		return hr
	}
	forever := -1
	attacks := []struct {
		name string
		obj  client.Object
		want string
	}{
		{"a spec past what admission decodes", release("big-spec", false, func(hr *helmv2.HelmRelease) {
			for i := range 5000 {
				hr.Spec.ValuesFrom = append(hr.Spec.ValuesFrom, helmv2.ValuesReference{Kind: "ConfigMap", Name: fmt.Sprintf("cm-%d", i), ValuesKey: strings.Repeat("k", 40)})
			}
		}), "more than the 256 KiB"},
		{"more suspects than admission looks up", release("suspects", false, func(hr *helmv2.HelmRelease) {
			for i := range placement.MaxSuspectPlanes + 1 {
				hr.Spec.ValuesFrom = append(hr.Spec.ValuesFrom, helmv2.ValuesReference{Kind: "Secret", Name: fmt.Sprintf("p%d%s", i, cpv1.ApplierKubeconfigSuffix)})
			}
		}), "more than the 8 the operator's admission looks up"},
		{"a placement release every second", release("hot", true, func(hr *helmv2.HelmRelease) {
			hr.Spec.Interval = metav1.Duration{Duration: time.Second}
		}), "spec.interval: Invalid value: \"1s\": must be at least 30s"},
		{"a placement release holding a worker for an hour", release("slow", true, func(hr *helmv2.HelmRelease) {
			hr.Spec.Timeout = &metav1.Duration{Duration: time.Hour}
		}), "spec.timeout"},
		{"a placement release retrying forever", release("forever", true, func(hr *helmv2.HelmRelease) {
			hr.Spec.Install = &helmv2.Install{Remediation: &helmv2.InstallRemediation{Retries: forever}}
		}), "retries forever"},
		{"a placement release keeping every revision in the shared data store", release("history", true, func(hr *helmv2.HelmRelease) {
			hr.Spec.MaxHistory = ptr.To(0)
		}), "spec.maxHistory: Invalid value: 0"},
	}
	for _, a := range attacks {
		err := mallory.Create(ctx, a.obj, client.DryRunAll)
		switch {
		case err == nil:
			t.Errorf("%s: admitted", a.name)
		case !strings.Contains(err.Error(), a.want):
			t.Errorf("%s: refused, but not by the bound (%v); want %q", a.name, err, a.want)
		}
	}

	// Values are never judged: 2 MiB of them (the apiserver's own bound) pass, and the
	// webhook's field patch routes the release.
	var values strings.Builder
	values.WriteString(`{"blob":{`)
	for i := 0; values.Len() < 2<<20; i++ {
		if i > 0 {
			values.WriteString(",")
		}
		fmt.Fprintf(&values, `"k%d":0`, i)
	}
	values.WriteString("}}")
	big := release("big-values", true, func(hr *helmv2.HelmRelease) {
		hr.Spec.Values = &apiextensionsv1.JSON{Raw: []byte(values.String())}
	})
	if err := mallory.Create(ctx, big, client.DryRunAll); err != nil {
		t.Fatalf("a placement release with large values was refused: %v", err)
	}
	if big.Spec.KubeConfig == nil || big.Spec.KubeConfig.SecretRef.Name != p.Name+cpv1.ApplierKubeconfigSuffix ||
		big.Spec.TargetNamespace != p.Namespace || !strings.Contains(string(big.Spec.Values.Raw), `"k1000":0`) {
		t.Errorf("the release was not routed, or its values changed: kubeConfig %v, targetNamespace %q", big.Spec.KubeConfig, big.Spec.TargetNamespace)
	}
}

// TestPlacementBoundTightenedIsSuspended: the class's bounds hold for what was stored
// before them too. A release within them is suspended (NotRouted, naming the bound) when
// the class raises its minInterval past the release's interval, its tenant cannot resume
// it, and the operator resumes it once the class allows it again.
func TestPlacementBoundTightenedIsSuspended(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := newClass("tightened-" + rand.String(6))
	p := planeWithClass(t, ctx, class)
	tenant := fluxTenant(t, ctx, p.Namespace, "mallory")
	hr := placementRelease(p.Namespace, "app") // interval 1m
	if err := tenant.Create(ctx, hr); err != nil {
		t.Fatal(err)
	}
	setMinInterval := func(d time.Duration) {
		t.Helper()
		eventually(t, settle, func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), class); err != nil {
				return err
			}
			class.Spec.PlacementReleases.MinInterval = &metav1.Duration{Duration: d}
			return k8s.Update(ctx, class)
		})
	}
	suspended := func(want bool) func() error {
		return func() error {
			got := &helmv2.HelmRelease{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(hr), got); err != nil {
				return err
			}
			if got.Spec.Suspend != want || (got.Annotations[cpv1.SuspendedAnnotation] != "") != want {
				return fmt.Errorf("suspend %v, annotation %q; want suspended %v", got.Spec.Suspend, got.Annotations[cpv1.SuspendedAnnotation], want)
			}
			return nil
		}
	}

	setMinInterval(5 * time.Minute)
	eventually(t, settle, suspended(true))
	eventually(t, settle, releaseEvent(ctx, hr, placement.NotRoutedReason, "must be at least 5m0s"))
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(hr.DeepCopy())
	hr.Spec.Suspend = false
	denied(t, tenant.Patch(ctx, hr, patch), "must be at least 5m0s")

	setMinInterval(30 * time.Second)
	eventually(t, settle, suspended(false))
}
