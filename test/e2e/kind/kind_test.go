//go:build unix

// Package kind drives the kind end-to-end path (run.sh): a real management cluster with
// KubeVirt, Kamaji, Cluster API and Flux, the operator from its Helm chart, and one real
// ComputePlane. TestKind runs it (Docker needed, about an hour); TestKindPlan and
// TestVersionsEnv always run and need nothing but bash.
package kind

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kindBudget is what `run.sh up` plus `run.sh down` may take: the images are pulled, the
// VM's disk imported and the VM booted under emulation. Run with -timeout 150m.
const kindBudget = 140 * time.Minute

// TestKind runs the whole path against a kind cluster and deletes the cluster afterwards.
func TestKind(t *testing.T) {
	if os.Getenv("COMPUTEPLANE_KIND_E2E") != "1" {
		t.Skip("the kind end-to-end path needs Docker and about an hour: run it with " +
			"`make kind-e2e` (COMPUTEPLANE_KIND_E2E=1 go test -count=1 -v -timeout 150m -run '^TestKind$' ./test/e2e/kind/); " +
			"KIND_E2E_KEEP=1 keeps the cluster afterwards")
	}
	if deadline, ok := t.Deadline(); ok && time.Until(deadline) < kindBudget {
		t.Fatalf("the kind end-to-end path may take %v; run go test with -timeout 150m (%v left)", kindBudget, time.Until(deadline).Round(time.Minute))
	}
	t.Cleanup(func() {
		if os.Getenv("KIND_E2E_KEEP") == "1" {
			t.Log("KIND_E2E_KEEP=1: the kind cluster stays; `bash test/e2e/kind/run.sh down` deletes it")
			return
		}
		// t.Context is done by now: the deletion gets its own time.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if err := runScript(ctx, t, "down"); err != nil {
			t.Errorf("run.sh down: %v", err)
		}
	})
	// Ctrl-C stops run.sh the same way a deadline does, and the cleanup still runs.
	ctx, stop := signal.NotifyContext(t.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runScript(ctx, t, "up"); err != nil {
		t.Fatalf("run.sh up: %v (the FAIL line and the diagnostics above say where)", err)
	}
}

// runScript runs `bash run.sh ARGS...` with its output streamed into the test log.
func runScript(ctx context.Context, t *testing.T, args ...string) error {
	t.Helper()
	cmd := exec.CommandContext(ctx, "bash", append([]string{"run.sh"}, args...)...)
	cmd.Stdout = t.Output()
	cmd.Stderr = t.Output()
	// run.sh and everything it starts (a kubectl wait in the foreground, the port-forward)
	// form their own process group. On a deadline or Ctrl-C the whole group gets SIGINT:
	// the wait ends at once, and run.sh's trap stops what it started and prints the
	// cluster's state, with a little time to do so.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = 2 * time.Minute
	return cmd.Run()
}

// TestKindPlan checks, without Docker, kind, kubectl or a network, that the plan run.sh
// prints has every stage in order and uses every pinned version.
func TestKindPlan(t *testing.T) {
	home := t.TempDir()
	cmd := exec.Command("bash", "run.sh", "plan")
	// Nothing but the basic tools on PATH, and a fresh HOME: the plan needs neither the
	// pinned tools nor a cache, and must write nothing.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "LANG=C"}
	out, err := cmd.CombinedOutput()
	plan := string(out)
	if err != nil {
		t.Fatalf("run.sh plan: %v\n%s", err, plan)
	}

	stages := []struct{ name, text string }{
		{"the pinned tools", "+ curl -fsSL --retry 3 -o " + home + "/.cache/computeplane/kind-e2e/bin/kind-"},
		{"kind create cluster", "+ kind create cluster --name computeplane-e2e"},
		{"Cilium", "+ helm upgrade --install cilium oci://quay.io/cilium/charts/cilium"},
		{"cert-manager", "/cert-manager.yaml"},
		{"KubeVirt", "/kubevirt-operator.yaml"},
		{"KubeVirt's software emulation", `"developerConfiguration":{"useEmulation":true}`},
		{"CDI", "/cdi-operator.yaml"},
		{"Kamaji (before clusterctl: its CAPI provider needs Kamaji's CRDs)", "+ helm upgrade --install kamaji kamaji --repo https://clastix.github.io/charts"},
		{"clusterctl init", "+ clusterctl init"},
		{"Flux", "/install.yaml"},
		{"the operator image", "+ docker build -t computeplane:e2e"},
		{"the image into kind", "+ kind load docker-image computeplane:e2e"},
		{"the operator chart", "+ helm upgrade --install computeplane "},
		{"the class", "kind: ComputePlaneClass"},
		{"the plane", "kind: ComputePlane\n"},
		{"the plane's Ready", "+ kubectl wait --for=condition=Ready computeplane/e2e"},
		{"the admin kubeconfig", `go-template={{index .data "super-admin.svc" | base64decode}}`},
		{"the plane's nodes", "wait --for=condition=Ready node --all"},
		{"the placement release", "computeplane.cozystack.io/placement: ComputePlane"},
		{"the placement release Ready", "wait helmrelease/podinfo --for=condition=Ready"},
		{"the workload in the plane", "CHECK: podinfo pods are Ready in the plane's placement namespace"},
		{"the deployer identity", "CHECK: as the deployer, the applier credential reads the release's Deployment"},
		{"the reachability probe", "apply -f " + home + "/.cache/computeplane/kind-e2e/work/computeplane-e2e/probe.yaml"},
		{"the reachability check", "CHECK: the plane cannot reach the management API server"},
		{"the deletion", "+ kubectl -n tenant-e2e delete computeplane e2e"},
		{"the wait for it to go", "--for=delete computeplane/e2e"},
		{"the infrastructure namespace gone", "CHECK: the infrastructure namespace"},
		{"the CAPI Cluster gone", "CHECK: no Cluster API Cluster of the plane remains"},
	}
	at := 0
	for _, s := range stages {
		i := strings.Index(plan[at:], s.text)
		if i < 0 {
			if strings.Contains(plan, s.text) {
				t.Errorf("stage %q (%q) is out of order: it comes before the stage above it", s.name, s.text)
			} else {
				t.Errorf("stage %q (%q) is not in the plan", s.name, s.text)
			}
			continue
		}
		at += i + len(s.text)
	}
	if !strings.Contains(plan, "config/helm/computeplane") {
		t.Errorf("the plan does not install the operator from config/helm/computeplane")
	}

	versions, problems := parseVersions(t, "versions.env")
	for _, p := range problems {
		t.Errorf("versions.env: %s", p)
	}
	for _, v := range versions {
		if !strings.Contains(plan, v.value) {
			t.Errorf("%s=%s from versions.env is not used anywhere in the plan", v.key, v.value)
		}
	}

	// The plan is printed, not executed: it leaves nothing behind.
	if entries, err := os.ReadDir(home); err != nil || len(entries) != 0 {
		t.Errorf("run.sh plan wrote into HOME (%v): %v", err, entries)
	}
	if t.Failed() {
		t.Logf("the plan:\n%s", plan)
	}
}

// TestVersionsEnv checks versions.env is what run.sh and this test both read the same
// way: KEY=value lines with a comment above each, no duplicate or empty key or value.
func TestVersionsEnv(t *testing.T) {
	versions, problems := parseVersions(t, "versions.env")
	for _, p := range problems {
		t.Error(p)
	}
	if len(versions) == 0 {
		t.Fatal("versions.env pins nothing")
	}
	// bash must see the same values (no quoting or expansion surprises).
	script := "set -eu; . ./versions.env"
	for _, v := range versions {
		script += fmt.Sprintf("; printf '%%s=%%s\\n' %s \"$%s\"", v.key, v.key)
	}
	out, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("bash cannot source versions.env: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, v := range versions {
		if i >= len(got) || got[i] != v.key+"="+v.value {
			t.Errorf("bash reads %s differently: %q, this test reads %q", v.key, got[min(i, len(got)-1)], v.key+"="+v.value)
		}
	}
}

type pin struct{ key, value string }

var (
	keyPattern   = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	valuePattern = regexp.MustCompile(`^[A-Za-z0-9._:/@+-]+$`)
)

// parseVersions reads KEY=value lines and reports every way the file is not as run.sh
// and the tests expect it.
func parseVersions(t *testing.T, path string) ([]pin, []string) {
	t.Helper()
	f, err := os.Open(filepath.Clean(path))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		pins     []pin
		problems []string
		seen     = map[string]int{}
		comment  bool // the line above was a comment
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			comment = false
			continue
		case strings.HasPrefix(trimmed, "#"):
			comment = true
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("line %d is not KEY=value: %q", n, line))
		case !keyPattern.MatchString(key):
			problems = append(problems, fmt.Sprintf("line %d: key %q is empty or not an upper-case shell name", n, key))
		case value == "":
			problems = append(problems, fmt.Sprintf("line %d: %s has an empty value", n, key))
		case !valuePattern.MatchString(value):
			problems = append(problems, fmt.Sprintf("line %d: %s=%q needs quoting in a shell; keep values to plain words", n, key, value))
		default:
			if first, dup := seen[key]; dup {
				problems = append(problems, fmt.Sprintf("line %d: %s is set again (first on line %d)", n, key, first))
			}
			seen[key] = n
			if !comment {
				problems = append(problems, fmt.Sprintf("line %d: %s has no comment above it saying what it pins", n, key))
			}
			pins = append(pins, pin{key, value})
		}
		comment = false
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return pins, problems
}
