package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers"
	"github.com/cozystack/computeplane/controllers/placement"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/test/operatortest"
)

// BenchmarkAdmissionUnderFlood: the webhook as a weapon. The manager (the real binary,
// in a memory cgroup at the chart's 768Mi limit, restarted when it exits, as a pod's
// container) serves the webhooks. A flood keeps 8 admission reviews in flight, each of a
// placement release of ~2.9 MiB whose values are ~280,000 tiny keys (the worst object the
// apiserver takes), sent to the webhooks themselves: this machine's apiserver spends its
// two cores decoding such objects long before it reaches any webhook (a create times out
// at 60 s), where a production apiserver reaches them, so the apiserver would measure
// only itself. Meanwhile another tenant creates 50 ordinary placement releases one after
// the other through the apiserver (and so through the same webhooks). Prints that
// tenant's create latency p50/p99 without and with the flood, how many of its creates
// failed, the flood's reviews, the manager's peak memory (the cgroup's high-water mark),
// its OOM kills and restarts.
func BenchmarkAdmissionUnderFlood(b *testing.B) {
	const ordinary, flooders = 50, 8
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	mgmt, err := devenv.StartManagement(devenv.ManagementOptions{Scheme: controllers.NewScheme(), Webhooks: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = mgmt.Stop() })
	proc, err := operatortest.StartProcess(ctx, mgmt, operatortest.ProcessOptions{Args: []string{"--leader-elect=false"},
		Webhooks: true, Restart: true, MemoryLimit: 768 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(proc.Stop)
	c := mgmt.Client
	o := &operator{mgmt: mgmt}
	class := o.createClass(b, ctx, "flood")
	class.Spec.PlacementReleases.MaxReleases = 5000
	if err := c.Update(ctx, class); err != nil {
		b.Fatal(err)
	}
	for _, ns := range []string{"tenant-victim", "tenant-flood"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
		if err := c.Create(ctx, &cpv1.ComputePlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plane"},
			Spec: cpv1.ComputePlaneSpec{ClassName: class.Name}}); err != nil {
			b.Fatal(err)
		}
	}
	review := webhookClient(b, mgmt)
	release := func(ns, name string) *helmv2.HelmRelease {
		return &helmv2.HelmRelease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{cpv1.PlacementLabel: cpv1.PlacementLabelValue}},
			Spec: helmv2.HelmReleaseSpec{Interval: metav1.Duration{Duration: time.Minute},
				ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "app"}},
		}
	}
	var worst strings.Builder
	worst.WriteString(`{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{"name":"worst","namespace":"tenant-flood","labels":{"` +
		cpv1.PlacementLabel + `":"` + cpv1.PlacementLabelValue + `"}},"spec":{"interval":"1m","chartRef":{"kind":"OCIRepository","name":"app"},"values":{"k":{`)
	for i := 0; worst.Len() < 2900<<10; i++ {
		if i > 0 {
			worst.WriteString(",")
		}
		fmt.Fprintf(&worst, `"%x":0`, i)
	}
	worst.WriteString("}}}}")
	object := []byte(worst.String())

	measure := func(prefix string) (p50, p99 time.Duration, failed int) {
		lat := make([]time.Duration, 0, ordinary)
		for i := range ordinary {
			t0 := time.Now()
			if err := c.Create(ctx, release("tenant-victim", fmt.Sprintf("%s-%d", prefix, i))); err != nil {
				failed++
				continue
			}
			lat = append(lat, time.Since(t0))
		}
		if len(lat) == 0 {
			return 0, 0, failed
		}
		slices.Sort(lat)
		return lat[len(lat)/2], lat[len(lat)*99/100], failed
	}
	time.Sleep(3 * time.Second)

	b.ResetTimer()
	for round := range b.N {
		q50, q99, qfailed := measure(fmt.Sprintf("quiet-%d", round))
		runs := proc.Runs()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var sent, refused atomic.Int64
		var firstRefusal atomic.Value
		for f := range flooders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					path := placement.PlacementMutatePath
					if (f+i)%2 == 1 {
						path = placement.PlacementValidatePath
					}
					err := review(ctx, path, object)
					sent.Add(1)
					if err != nil {
						refused.Add(1)
						firstRefusal.CompareAndSwap(nil, err.Error())
					}
				}
			}()
		}
		time.Sleep(2 * time.Second)
		f50, f99, ffailed := measure(fmt.Sprintf("flood-%d", round))
		close(stop)
		wg.Wait()
		mem, err := proc.MemoryCgroup()
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("ordinary placement release, quiet:   p50 %6.2f ms  p99 %7.2f ms  (%d of %d failed)", ms(q50), ms(q99), qfailed, ordinary)
		b.Logf("ordinary placement release, flooded: p50 %6.2f ms  p99 %7.2f ms  (%d of %d failed)", ms(f50), ms(f99), ffailed, ordinary)
		b.Logf("flood: %d worst-case admission reviews (%d failed); manager peak %.0f MiB of 768, %d OOM kill(s), %d restart(s)",
			sent.Load(), refused.Load(), mib(float64(mem.MaxUsage)), mem.OOMKills, proc.Runs()-runs)
		if why, _ := firstRefusal.Load().(string); why != "" {
			b.Logf("first failed review of the flood: %.300s", why)
		}
		b.ReportMetric(ms(f99), "flooded-p99-ms")
		b.ReportMetric(mib(float64(mem.MaxUsage)), "peak-MiB")
		b.ReportMetric(float64(ffailed), "flooded-failed")
	}
}

// webhookClient posts an AdmissionReview of a dry-run create of object to one of the
// manager's webhook paths, as the apiserver does, and returns an error unless the
// webhook answered it.
func webhookClient(b *testing.B, mgmt *devenv.Cluster) func(ctx context.Context, path string, object []byte) error {
	b.Helper()
	o := mgmt.Env.WebhookInstallOptions
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(o.LocalServingCAData) {
		b.Fatal("the webhook's CA does not parse")
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	url := fmt.Sprintf("https://%s/", net.JoinHostPort(o.LocalServingHost, strconv.Itoa(o.LocalServingPort)))
	return func(ctx context.Context, path string, object []byte) error {
		ar := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: types.UID(rand.String(8)), Operation: admissionv1.Create, DryRun: ptr.To(true),
				Kind:      metav1.GroupVersionKind{Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmRelease"},
				Resource:  metav1.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"},
				Namespace: "tenant-flood", Name: "worst", UserInfo: authenticationv1.UserInfo{Username: "mallory"},
				Object: runtime.RawExtension{Raw: object}}}
		body, err := json.Marshal(ar)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+strings.TrimPrefix(path, "/"), bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var answer admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			return fmt.Errorf("%s: %w", resp.Status, err)
		}
		if answer.Response == nil {
			return fmt.Errorf("%s: no response", resp.Status)
		}
		return nil
	}
}
