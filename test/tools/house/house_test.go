package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const mod = "example.com/m"

// fake builds a graph from "package: import import ..." lines ("m:x" is the module's package x;
// Deps are computed), with the Go files named in files written to a temporary directory.
func fake(t *testing.T, lines []string, files map[string]string) *graph {
	t.Helper()
	g := &graph{module: mod, pkgs: map[string]*pkg{}}
	dir := t.TempDir()
	abs := func(p string) string {
		if rel, ok := strings.CutPrefix(p, "m:"); ok {
			return mod + "/" + rel
		}
		return p // a standard or external package
	}
	for _, line := range lines {
		name, imports, _ := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		path := mod + "/" + name
		p := &pkg{ImportPath: path, Dir: filepath.Join(dir, name), Module: &struct {
			Path string
			Main bool
		}{mod, true}}
		for _, imp := range strings.Fields(imports) {
			p.Imports = append(p.Imports, abs(imp))
		}
		g.pkgs[path] = p
		g.mine = append(g.mine, path)
	}
	for file, src := range files {
		full := filepath.Join(dir, file)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		p := g.pkgs[mod+"/"+filepath.Dir(file)]
		p.GoFiles = append(p.GoFiles, filepath.Base(file))
	}
	// The packages outside the module the lines name, with no imports.
	for _, p := range g.pkgs {
		for _, imp := range p.Imports {
			if _, ok := g.pkgs[imp]; !ok {
				g.pkgs[imp] = &pkg{ImportPath: imp}
			}
		}
	}
	for _, p := range g.pkgs {
		seen := map[string]bool{}
		var walk func(string)
		walk = func(at string) {
			for _, imp := range g.pkgs[at].Imports {
				if !seen[imp] {
					seen[imp] = true
					walk(imp)
				}
			}
		}
		walk(p.ImportPath)
		for d := range seen {
			p.Deps = append(p.Deps, d)
		}
	}
	return g
}

func must(t *testing.T, r result, violations []string, notes int) {
	t.Helper()
	if len(r.violations) != len(violations) || len(r.notes) != notes {
		t.Fatalf("%s: got violations %q notes %q; want %d violations, %d notes", r.rule, r.violations, r.notes, len(violations), notes)
	}
	for i, want := range violations {
		if !strings.Contains(r.violations[i], want) {
			t.Errorf("%s: violation %q does not say %q", r.rule, r.violations[i], want)
		}
	}
}

func TestApart(t *testing.T) {
	g := fake(t, []string{
		"controllers/computeplane: m:controllers/shared",
		"controllers/shared: m:controllers/placement",
		"controllers/placement:",
	}, nil)
	must(t, g.ruleApart(), []string{"controllers/computeplane imports controllers/placement: controllers/computeplane -> controllers/shared -> controllers/placement"}, 0)

	g = fake(t, []string{"controllers/computeplane: m:controllers/shared", "controllers/shared:", "controllers/placement: m:controllers/shared"}, nil)
	must(t, g.ruleApart(), nil, 0)

	g = fake(t, []string{"controllers/computeplane:"}, nil)
	must(t, g.ruleApart(), nil, 1) // placement does not exist yet
}

func TestTestTree(t *testing.T) {
	g := fake(t, []string{
		"cmd/demo: m:test/devprovider",
		"internal/devenv: m:api",
		"api:",
		"test/devprovider: m:test/operatortest m:internal/devenv",
		"test/operatortest:",
	}, nil)
	must(t, g.ruleTestTree(), []string{"cmd/demo imports test/devprovider"}, 0)
}

func TestPure(t *testing.T) {
	g := fake(t, []string{
		"render: m:api sort " + clientPkg,
		"api: " + "sigs.k8s.io/controller-runtime/pkg/scheme",
		"posture: m:helpers",
		"helpers: net/http",
		"netpol: example.com/lib",
		"remote: os " + clientPkg,
	}, map[string]string{
		"render/a.go":  "package render\nimport \"" + clientPkg + "\"\nfunc F(o client.Object) client.ObjectKey { return client.ObjectKeyFromObject(o) }\n",
		"remote/a.go":  "package remote\nimport cr \"" + clientPkg + "\"\nfunc F(c cr.Client, o cr.Object) error { return cr.IgnoreNotFound(nil) }\n",
		"remote/b.go":  "package remote\nfunc G() {}\n",
		"helpers/a.go": "package helpers\n",
	})
	// netpol reaches the manager through an external library.
	g.pkgs["example.com/lib"].Imports = []string{"sigs.k8s.io/controller-runtime/pkg/manager"}
	g.pkgs["sigs.k8s.io/controller-runtime/pkg/manager"] = &pkg{ImportPath: "sigs.k8s.io/controller-runtime/pkg/manager"}
	g.pkgs[mod+"/netpol"].Deps = append(g.pkgs[mod+"/netpol"].Deps, "sigs.k8s.io/controller-runtime/pkg/manager")

	must(t, g.rulePure([]string{"render", "api", "tenancy"}), nil, 1)
	must(t, g.rulePure([]string{"posture"}), []string{"posture reaches helpers (posture -> helpers), which imports net/http"}, 0)
	must(t, g.rulePure([]string{"netpol"}), []string{"netpol depends on sigs.k8s.io/controller-runtime/pkg/manager: netpol -> example.com/lib -> sigs.k8s.io/controller-runtime/pkg/manager"}, 0)
	must(t, g.rulePure([]string{"remote"}), []string{"remote imports os; and uses client.Client (a.go:3), client.IgnoreNotFound (a.go:3)"}, 0)
}
