package placement

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func TestBoundErrors(t *testing.T) {
	three := int32(3)
	class := boundsOf(cpv1.PlacementReleasePolicy{MinInterval: &metav1.Duration{Duration: time.Minute},
		MaxTimeout: &metav1.Duration{Duration: 10 * time.Minute}, MaxRetries: &three})
	for _, tc := range []struct {
		name, spec string
		bounds     releaseBounds
		want       []string
	}{
		{name: "within the defaults", spec: `{"interval":"5m","timeout":"10m","install":{"remediation":{"retries":3}}}`, bounds: boundsOf(cpv1.PlacementReleasePolicy{})},
		{name: "a 1s interval under the defaults", spec: `{"interval":"1s"}`, bounds: boundsOf(cpv1.PlacementReleasePolicy{}), want: []string{"spec.interval", "at least 30s"}},
		{name: "the chart's interval", spec: `{"interval":"1m","chart":{"spec":{"interval":"10s"}}}`, bounds: class, want: []string{"spec.chart.spec.interval"}},
		{name: "a retry interval", spec: `{"interval":"1m","upgrade":{"strategy":{"name":"RetryOnFailure","retryInterval":"1s"}}}`, bounds: class, want: []string{"spec.upgrade.strategy.retryInterval"}},
		{name: "an action's timeout", spec: `{"interval":"1m","uninstall":{"timeout":"1h"}}`, bounds: class, want: []string{"spec.uninstall.timeout", "at most 10m0s"}},
		{name: "retries forever", spec: `{"interval":"1m","install":{"remediation":{"retries":-1}}}`, bounds: class, want: []string{"spec.install.remediation.retries", "retries forever"}},
		{name: "too many retries", spec: `{"interval":"1m","upgrade":{"remediation":{"retries":4}}}`, bounds: class, want: []string{"spec.upgrade.remediation.retries"}},
		{name: "unparsable is Flux's schema's", spec: `{"interval":"soon"}`, bounds: class},
		{name: "every revision kept", spec: `{"interval":"1m","maxHistory":0}`, bounds: class, want: []string{"spec.maxHistory", "0 keeps them all"}},
		{name: "a long history", spec: `{"interval":"1m","maxHistory":11}`, bounds: class, want: []string{"spec.maxHistory"}},
		{name: "Flux's default history", spec: `{"interval":"1m","maxHistory":5}`, bounds: class},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := boundErrors(obj(t, `{"spec":`+tc.spec+`}`), tc.bounds)
			if (len(errs) > 0) != (len(tc.want) > 0) {
				t.Fatalf("errors %v, want %v", errs, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs.ToAggregate().Error(), w) {
					t.Errorf("%v does not say %q", errs, w)
				}
			}
		})
	}
}
