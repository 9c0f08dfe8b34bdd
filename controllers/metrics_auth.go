package controllers

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long a scrape's verdict is reused: an allowed token for a minute (as
// controller-runtime's filter caches a TokenReview), a refused one for 10 s (so a
// scraper bound a moment ago is let in soon, and a flood of bad requests still costs
// the API server one review pair per 10 s and token).
const (
	metricsAllowTTL  = time.Minute
	metricsDenyTTL   = 10 * time.Second
	metricsReviewTTL = 10 * time.Second
	// metricsCacheSize bounds the verdicts kept, of each kind: scrapers are a handful of
	// identities; a caller cycling through tokens only empties the refusals sooner, never
	// the scrapers' permissions.
	metricsCacheSize = 256
	// metricsReviewRate and metricsReviewBurst bound the reviews of tokens not seen yet:
	// each is a TokenReview and a SubjectAccessReview on the management API server, and
	// a caller that can reach the port would otherwise choose how many. Past the bound a
	// request is answered 429, unreviewed (a scraper's retry is reviewed in time).
	metricsReviewRate  = 5
	metricsReviewBurst = 20
)

// metricsAuthFilter serves the metrics endpoint only to callers the management API
// server authenticates (a TokenReview of their bearer token) and authorizes (a
// SubjectAccessReview of the request's verb on its non-resource path), as
// controller-runtime's filters.WithAuthenticationAndAuthorization does. It is its own
// because that filter links the API server's authentication library, and with it CEL,
// gRPC and OpenTelemetry: 9 MB of binary, about 5 MiB of every manager's memory.
func metricsAuthFilter(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	scheme := runtime.NewScheme()
	if err := authenticationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := authorizationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{HTTPClient: httpClient, Scheme: scheme})
	if err != nil {
		return nil, err
	}
	a := &metricsAuth{reviews: c, now: time.Now, limit: newReviewLimit()}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		a.log = log
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if code := a.verdict(req); code != http.StatusOK {
				http.Error(w, http.StatusText(code), code)
				return
			}
			next.ServeHTTP(w, req)
		}), nil
	}, nil
}

type metricsAuth struct {
	reviews client.Client
	log     logr.Logger
	now     func() time.Time

	limit *rate.Limiter

	mu sync.Mutex
	// allowed and refused are the verdicts still reused, kept apart so that refusals
	// never evict a scraper's permission.
	allowed, refused map[[sha256.Size]byte]metricsVerdict
}

func newReviewLimit() *rate.Limiter { return rate.NewLimiter(metricsReviewRate, metricsReviewBurst) }

type metricsVerdict struct {
	code    int
	expires time.Time
}

// verdict is the HTTP status a request gets: 200 to be served, 401 without a token the
// API server accepts, 403 without the right, 500 when the API server could not say.
func (a *metricsAuth) verdict(req *http.Request) int {
	token, ok := bearerToken(req.Header.Get("Authorization"))
	if !ok {
		return http.StatusUnauthorized
	}
	verb := strings.ToLower(req.Method)
	// The token is never kept, only its hash with what it asked for.
	key := sha256.Sum256([]byte(verb + "\x00" + req.URL.Path + "\x00" + token))
	now := a.now()
	a.mu.Lock()
	for _, verdicts := range []map[[sha256.Size]byte]metricsVerdict{a.allowed, a.refused} {
		// A permission that expired must not hide the refusal that replaced it.
		if v, found := verdicts[key]; found && now.Before(v.expires) {
			a.mu.Unlock()
			return v.code
		}
	}
	a.mu.Unlock()
	if a.limit != nil && !a.limit.AllowN(now, 1) {
		return http.StatusTooManyRequests
	}
	ctx, cancel := context.WithTimeout(req.Context(), metricsReviewTTL)
	defer cancel()
	code, err := a.review(ctx, token, verb, req.URL.Path)
	if err != nil {
		// Not cached: the next scrape asks again.
		a.log.Error(err, "Could not review a metrics request")
		return http.StatusInternalServerError
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if code == http.StatusOK {
		a.allowed = remember(a.allowed, key, metricsVerdict{code: code, expires: now.Add(metricsAllowTTL)}, now)
	} else {
		a.refused = remember(a.refused, key, metricsVerdict{code: code, expires: now.Add(metricsDenyTTL)}, now)
	}
	return code
}

// remember adds a verdict to verdicts, first dropping the expired ones when they fill
// the cache, and all of them if that is not enough.
func remember(verdicts map[[sha256.Size]byte]metricsVerdict, key [sha256.Size]byte, v metricsVerdict, now time.Time) map[[sha256.Size]byte]metricsVerdict {
	if verdicts == nil || len(verdicts) >= metricsCacheSize {
		verdicts = pruned(verdicts, now)
	}
	verdicts[key] = v
	return verdicts
}

// pruned is the verdicts still valid, or none if they fill the cache.
func pruned(verdicts map[[sha256.Size]byte]metricsVerdict, now time.Time) map[[sha256.Size]byte]metricsVerdict {
	kept := make(map[[sha256.Size]byte]metricsVerdict, len(verdicts))
	for k, v := range verdicts {
		if now.Before(v.expires) {
			kept[k] = v
		}
	}
	if len(kept) >= metricsCacheSize {
		return make(map[[sha256.Size]byte]metricsVerdict)
	}
	return kept
}

func (a *metricsAuth) review(ctx context.Context, token, verb, path string) (int, error) {
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	if err := a.reviews.Create(ctx, tr); err != nil {
		return 0, fmt.Errorf("reviewing the token: %w", err)
	}
	if !tr.Status.Authenticated {
		a.log.V(4).Info("Metrics request with a token the API server does not accept", "error", tr.Status.Error)
		return http.StatusUnauthorized, nil
	}
	user := tr.Status.User
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}}
	if err := a.reviews.Create(ctx, sar); err != nil {
		return 0, fmt.Errorf("reviewing %s's access: %w", user.Username, err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		a.log.V(4).Info("Metrics request refused", "user", user.Username, "reason", sar.Status.Reason)
		return http.StatusForbidden, nil
	}
	return http.StatusOK, nil
}

// bearerToken is the token of an "Authorization: Bearer <token>" header, as the API
// server reads it (the scheme in any case, one token).
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	return token, true
}
