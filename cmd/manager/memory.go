package main

import (
	"log/slog"
	"math"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
)

// tuneMemory is the one place that decides how the manager collects garbage: Go's
// default pacing (GOGC 100), and a soft limit at 90 % of the container's memory limit
// (GOMEMLIMIT), so that the collector works harder as the heap nears the limit instead
// of the kernel killing the pod at it. GOGC, GOMEMLIMIT or AUTOMEMLIMIT=off in the
// environment win. A lower GOGC buys memory with CPU: a fleet at rest then spends most
// of its CPU collecting (docs/benchmarks.md, "Fleet at rest").
func tuneMemory(log logr.Logger) {
	if limit, err := memlimit.Set(memlimit.WithRatio(0.9), memlimit.WithLogger(slog.New(logr.ToSlogHandler(log)))); err == nil && limit != math.MaxInt64 {
		log.Info("memory limit from the container", "GOMEMLIMIT", limit)
	}
}
