package placement

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// The schema's defaults of a class's placement release bounds, for a class stored
// before the fields (or gone).
const (
	DefaultMinInterval = 30 * time.Second
	DefaultMaxTimeout  = 30 * time.Minute
	DefaultMaxRetries  = 5
	// MaxHelmHistory bounds the revisions Helm keeps of a placement release (Flux's
	// default is 5).
	MaxHelmHistory = 10
)

// releaseBounds are the class's bounds on what a placement release asks of Flux's
// shared controllers.
type releaseBounds struct {
	minInterval, maxTimeout time.Duration
	maxRetries              int64
}

func boundsOf(p cpv1.PlacementReleasePolicy) releaseBounds {
	b := releaseBounds{minInterval: DefaultMinInterval, maxTimeout: DefaultMaxTimeout, maxRetries: DefaultMaxRetries}
	if p.MinInterval != nil {
		b.minInterval = p.MinInterval.Duration
	}
	if p.MaxTimeout != nil {
		b.maxTimeout = p.MaxTimeout.Duration
	}
	if p.MaxRetries != nil {
		b.maxRetries = int64(*p.MaxRetries)
	}
	return b
}

var (
	intervalPaths = [][]string{
		{"spec", "interval"}, {"spec", "chart", "spec", "interval"},
		{"spec", "install", "strategy", "retryInterval"}, {"spec", "upgrade", "strategy", "retryInterval"},
	}
	timeoutPaths = [][]string{
		{"spec", "timeout"}, {"spec", "install", "timeout"}, {"spec", "upgrade", "timeout"},
		{"spec", "test", "timeout"}, {"spec", "rollback", "timeout"}, {"spec", "uninstall", "timeout"},
	}
	retryPaths = [][]string{
		{"spec", "install", "remediation", "retries"}, {"spec", "upgrade", "remediation", "retries"},
	}
)

// boundErrors lists every interval of a placement release below the class's floor, every
// timeout or retry count above its ceiling, and a Helm history past MaxHelmHistory. A value that does not parse is left
// to Flux's schema. Pure.
func boundErrors(obj map[string]any, b releaseBounds) field.ErrorList {
	var errs field.ErrorList
	duration := func(path []string) (time.Duration, bool) {
		s, ok := nested(obj, path...).(string)
		if !ok {
			return 0, false
		}
		d, err := time.ParseDuration(s)
		return d, err == nil
	}
	const why = "spec.placementReleases of the plane's ComputePlaneClass"
	for _, path := range intervalPaths {
		if d, ok := duration(path); ok && d < b.minInterval {
			errs = append(errs, field.Invalid(field.NewPath(path[0], path[1:]...), nested(obj, path...),
				fmt.Sprintf("must be at least %s (minInterval, %s): Flux's controllers are shared by every tenant", b.minInterval, why)))
		}
	}
	for _, path := range timeoutPaths {
		if d, ok := duration(path); ok && d > b.maxTimeout {
			errs = append(errs, field.Invalid(field.NewPath(path[0], path[1:]...), nested(obj, path...),
				fmt.Sprintf("must be at most %s (maxTimeout, %s)", b.maxTimeout, why)))
		}
	}
	if n, ok := nested(obj, "spec", "maxHistory").(float64); ok && (n < 1 || n > MaxHelmHistory) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "maxHistory"), n,
			fmt.Sprintf("must be between 1 and %d: Helm keeps every revision (its values and manifest, up to 1 MiB) as a Secret in the plane's data store, which other planes share; 0 keeps them all", MaxHelmHistory)))
	}
	for _, path := range retryPaths {
		n, ok := nested(obj, path...).(float64)
		if ok && (n < 0 || int64(n) > b.maxRetries) {
			errs = append(errs, field.Invalid(field.NewPath(path[0], path[1:]...), n,
				fmt.Sprintf("must be between 0 and %d (maxRetries, %s); a negative count retries forever", b.maxRetries, why)))
		}
	}
	return errs
}
