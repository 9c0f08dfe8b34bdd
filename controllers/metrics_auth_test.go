package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestBearerToken(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc":      "abc",
		"bearer abc":      "abc",
		"BEARER  abc ":    "abc",
		"":                "",
		"Bearer":          "",
		"Bearer ":         "",
		"Basic abc":       "",
		"Bearer abc def":  "",
		"Bearerabc":       "",
		"Bearer abc\tdef": "",
	} {
		got, ok := bearerToken(header)
		if got != want || ok != (want != "") {
			t.Errorf("bearerToken(%q) = %q, %v; want %q", header, got, ok, want)
		}
	}
}

// reviewer answers TokenReviews and SubjectAccessReviews from its tables, as the API
// server would, and counts them. (The real API server's answers are checked by
// TestMetricsMoveWithThePlane.)
type reviewer struct {
	client.Client
	users   map[string]string // token → user
	allowed map[string]bool   // user → may get /metrics
	err     error
	reviews int
}

func (r *reviewer) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	r.reviews++
	if r.err != nil {
		return r.err
	}
	switch o := obj.(type) {
	case *authenticationv1.TokenReview:
		user, ok := r.users[o.Spec.Token]
		o.Status = authenticationv1.TokenReviewStatus{Authenticated: ok, User: authenticationv1.UserInfo{Username: user}}
	case *authorizationv1.SubjectAccessReview:
		na := o.Spec.NonResourceAttributes
		o.Status.Allowed = na != nil && na.Path == "/metrics" && na.Verb == "get" && r.allowed[o.Spec.User]
	}
	return nil
}

// TestMetricsVerdicts: who gets what, how long a verdict is reused (an allowed scraper
// a minute, a refused one 10 s), that the API server's failure is a 500 asked again
// next time, and that a caller cycling tokens cannot grow the cache.
func TestMetricsVerdicts(t *testing.T) {
	r := &reviewer{users: map[string]string{"prom": "prometheus", "other": "someone"}, allowed: map[string]bool{"prometheus": true}}
	now := time.Unix(1e9, 0)
	a := &metricsAuth{reviews: r, now: func() time.Time { return now }}
	scrape := func(token, path string) int {
		req := httptest.NewRequest(http.MethodGet, "https://manager:8443"+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return a.verdict(req)
	}
	for _, tc := range []struct {
		token, path string
		want        int
		reviews     int
	}{
		{"", "/metrics", http.StatusUnauthorized, 0},
		{"forged", "/metrics", http.StatusUnauthorized, 1},
		{"other", "/metrics", http.StatusForbidden, 2},
		{"prom", "/metrics", http.StatusOK, 2},
		{"prom", "/debug", http.StatusForbidden, 2}, // a verdict is for one path
	} {
		before := r.reviews
		if got := scrape(tc.token, tc.path); got != tc.want || r.reviews-before != tc.reviews {
			t.Errorf("token %q, %s: %d after %d reviews; want %d after %d", tc.token, tc.path, got, r.reviews-before, tc.want, tc.reviews)
		}
	}

	// Reused: no review until a verdict expires.
	before := r.reviews
	scrape("prom", "/metrics")
	scrape("other", "/metrics")
	if r.reviews != before {
		t.Fatalf("cached verdicts were reviewed again (%d reviews)", r.reviews-before)
	}
	// The reader's binding is removed, the other caller is granted: the refusal expires
	// after 10 s, the permission after a minute.
	r.allowed = map[string]bool{"someone": true}
	now = now.Add(metricsDenyTTL + time.Second)
	if got := scrape("other", "/metrics"); got != http.StatusOK {
		t.Errorf("a caller granted after its refusal expired got %d", got)
	}
	if got := scrape("prom", "/metrics"); got != http.StatusOK {
		t.Errorf("an allowed verdict was dropped before its minute: %d", got)
	}
	now = now.Add(metricsAllowTTL)
	if got := scrape("prom", "/metrics"); got != http.StatusForbidden {
		t.Errorf("a revoked scraper still got %d a minute later", got)
	}
	before = r.reviews
	if got := scrape("prom", "/metrics"); got != http.StatusForbidden || r.reviews != before {
		t.Errorf("the refusal that replaced an expired permission was not reused: %d after %d reviews", got, r.reviews-before)
	}

	// The API server cannot answer: 500, and not remembered.
	r.err = errors.New("connection refused")
	if got := scrape("new", "/metrics"); got != http.StatusInternalServerError {
		t.Errorf("with the API server down: %d, want 500", got)
	}
	r.err = nil
	r.users["new"] = "prometheus"
	r.allowed["prometheus"] = true
	if got := scrape("new", "/metrics"); got != http.StatusOK {
		t.Errorf("after the API server came back: %d, want 200", got)
	}

	for i := range 3 * metricsCacheSize {
		scrape("forged-"+string(rune('a'+i%26))+time.Duration(i).String(), "/metrics")
	}
	if n := len(a.allowed) + len(a.refused); n > 2*metricsCacheSize {
		t.Errorf("%d verdicts kept, want at most %d", n, 2*metricsCacheSize)
	}
	before = r.reviews
	if got := scrape("new", "/metrics"); got != http.StatusOK || r.reviews != before {
		t.Errorf("a flood of refused tokens evicted a scraper's permission: %d after %d reviews", got, r.reviews-before)
	}
}

// TestMetricsReviewsAreRateLimited: the attack is a caller that reaches the metrics
// port and sends a new made-up token with every request: each was a TokenReview on the
// management API server, as many as it liked. Reviews of unseen tokens are bounded
// (a burst, then a steady rate); past it the answer is 429 without a review, and a
// scraper already let in is still served from its verdict.
func TestMetricsReviewsAreRateLimited(t *testing.T) {
	r := &reviewer{users: map[string]string{"prom": "prometheus"}, allowed: map[string]bool{"prometheus": true}}
	now := time.Unix(1e9, 0)
	a := &metricsAuth{reviews: r, now: func() time.Time { return now }, limit: newReviewLimit()}
	scrape := func(token string) int {
		req := httptest.NewRequest(http.MethodGet, "https://manager:8443/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return a.verdict(req)
	}
	if got := scrape("prom"); got != http.StatusOK {
		t.Fatalf("the scraper got %d", got)
	}
	limited := 0
	for i := range 1000 {
		if scrape(fmt.Sprintf("forged-%d", i)) == http.StatusTooManyRequests {
			limited++
		}
	}
	if r.reviews > metricsReviewBurst+2 || limited == 0 {
		t.Errorf("1,000 made-up tokens in an instant cost %d reviews (%d answered 429), want at most the burst of %d", r.reviews, limited, metricsReviewBurst)
	}
	if got := scrape("prom"); got != http.StatusOK {
		t.Errorf("during the flood the scraper got %d", got)
	}
	now = now.Add(time.Second)
	if got := scrape("forged-new"); got != http.StatusUnauthorized {
		t.Errorf("a second later an unseen token is reviewed again: got %d", got)
	}
}
