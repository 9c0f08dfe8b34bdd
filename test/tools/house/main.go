// Command house draws the module's packages and checks three rules about them.
//
//	go run ./test/tools/house              # write docs/house.md (make house)
//	go run ./test/tools/house -check       # check the rules; non-zero exit names the import (make house-check)
//	go run ./test/tools/house -check -pure remote   # would remote pass the purity rule? (it does not)
//
// Everything it knows comes from `go list -e -json -deps ./...` run at the module's root for
// linux/amd64 with CGO_ENABLED=0 (the manager image's platform), and, for the one rule that
// needs it, from parsing the pure packages' own .go files. Only non-test imports count: what a
// package's .go files import, not its _test.go files.
//
// The rules (the doc prints them from the variables below, so the two cannot disagree):
//
//	(a) controllers/computeplane and controllers/placement never import each other, directly or
//	    through other packages of the module.
//	(b) no package outside test/ (cmd/ included) imports a package under test/. The manager
//	    image's build context leaves test/ out (.dockerignore), which this rule makes safe.
//	(c) the pure packages (purePackages) do no I/O. A package is pure when
//	    1. neither it nor any package of the module it reaches imports a package of
//	       denyDirect (the wire, the filesystem, processes: os, net, net/http, syscall,
//	       k8s.io/client-go, sigs.k8s.io/controller-runtime) — except
//	       sigs.k8s.io/controller-runtime/pkg/scheme (a scheme builder registers types) and
//	       sigs.k8s.io/controller-runtime/pkg/client, which it may use for its types only
//	       (clientTypes: client.Object and friends; client.Client, client.New, client.Patch ...
//	       are I/O), read from the package's .go files; and
//	    2. its whole dependency graph, outside the module included, holds none of denyDeep:
//	       the machinery that runs I/O loops (controller-runtime's manager, cache, controller,
//	       webhook; client-go's clientsets, informers, kubeconfig loading).
//	    Rule 2 has to be a short exact list: any package importing pkg/client, or even the
//	    Kubernetes API types, reaches net/http and os through apimachinery, so "nothing below
//	    imports net/http" would make every Kubernetes package impure.
//
// A package a rule names that does not exist (yet) is skipped with a note, not a failure.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// purePackages are the packages rule (c) holds to no I/O, relative to the module's root.
var purePackages = []string{
	"api/v1alpha1",
	"controllers/render",
	"controllers/tenancy",
	"netpol",
	"remote/posture",
}

// apart are the pairs rule (a) keeps from importing each other.
var apart = [][2]string{
	{"controllers/computeplane", "controllers/placement"},
}

// testTree is the directory rule (b) keeps every other package from importing.
const testTree = "test"

// denyDirect: a pure package and every package of the module it reaches import none of these
// (a path matches itself and, when it ends in "/...", every package below it).
var denyDirect = []string{
	"os/...",
	"syscall",
	"io/ioutil",
	"net",
	"net/http/...",
	"net/rpc/...",
	"net/smtp",
	"golang.org/x/sys/...",
	"k8s.io/client-go/...",
	"sigs.k8s.io/controller-runtime/...",
}

// denyExceptions are allowed although denyDirect matches them.
var denyExceptions = []string{
	"sigs.k8s.io/controller-runtime/pkg/scheme",
	clientPkg, // for clientTypes only, checked in the source
}

const clientPkg = "sigs.k8s.io/controller-runtime/pkg/client"

// clientTypes are the names of clientPkg a pure package may use: types and a pure function.
var clientTypes = []string{"Object", "ObjectKey", "ObjectKeyFromObject", "ObjectList"}

// denyDeep: a pure package's whole dependency graph, outside the module included, holds none of
// these exact packages.
var denyDeep = []string{
	"k8s.io/client-go/informers",
	"k8s.io/client-go/kubernetes",
	"k8s.io/client-go/tools/clientcmd",
	"sigs.k8s.io/controller-runtime/pkg/cache",
	"sigs.k8s.io/controller-runtime/pkg/cluster",
	"sigs.k8s.io/controller-runtime/pkg/controller",
	"sigs.k8s.io/controller-runtime/pkg/envtest",
	"sigs.k8s.io/controller-runtime/pkg/manager",
	"sigs.k8s.io/controller-runtime/pkg/webhook",
}

// listEnv pins the platform go list resolves build constraints for, so the doc is the same on
// every machine: the manager image's.
var listEnv = []string{"GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOWORK=off"}

type pkg struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	CgoFiles     []string
	TestGoFiles  []string
	XTestGoFiles []string
	Imports      []string
	Deps         []string
	Module       *struct {
		Path string
		Main bool
	}
	Error      *struct{ Err string }
	DepsErrors []*struct{ Err string }
}

// graph is the module as go list sees it.
type graph struct {
	module string          // the module path
	root   string          // its directory
	pkgs   map[string]*pkg // every package, the module's and its dependencies, by import path
	mine   []string        // the module's packages, sorted
}

func (g *graph) rel(importPath string) string {
	if importPath == g.module {
		return "."
	}
	return strings.TrimPrefix(importPath, g.module+"/")
}

func (g *graph) abs(rel string) string { return g.module + "/" + rel }

func (g *graph) isMine(importPath string) bool {
	return importPath == g.module || strings.HasPrefix(importPath, g.module+"/")
}

func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

func load() (*graph, error) {
	gomod, err := output("go", "env", "GOMOD")
	if err != nil {
		return nil, err
	}
	gomod = strings.TrimSpace(gomod)
	if gomod == "" || gomod == os.DevNull {
		return nil, errors.New("not inside a Go module")
	}
	root := filepath.Dir(gomod)
	cmd := exec.Command("go", "list", "-e", "-json", "-deps", "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), listEnv...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	g := &graph{root: root, pkgs: map[string]*pkg{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(pkg)
		if err := dec.Decode(p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		g.pkgs[p.ImportPath] = p
		if p.Module != nil && p.Module.Main {
			g.module = p.Module.Path
		}
	}
	var broken []string
	for path, p := range g.pkgs {
		if p.Module == nil || !p.Module.Main {
			continue
		}
		g.mine = append(g.mine, path)
		if p.Error != nil {
			broken = append(broken, path+": "+p.Error.Err)
		}
		for _, e := range p.DepsErrors {
			broken = append(broken, path+": "+e.Err)
		}
	}
	if len(broken) > 0 {
		slices.Sort(broken)
		return nil, fmt.Errorf("go list reports errors in the module; the house is drawn from a tree that builds:\n  %s",
			strings.Join(slices.Compact(broken), "\n  "))
	}
	sort.Strings(g.mine)
	return g, nil
}

func output(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return string(out), nil
}

// path is the shortest chain of non-test imports from one package to another (nil if none).
// inModule keeps the walk to the module's packages.
func (g *graph) path(from, to string, inModule bool) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var chain []string
			for at := to; at != ""; at = prev[at] {
				chain = append(chain, at)
			}
			slices.Reverse(chain)
			return chain
		}
		p := g.pkgs[cur]
		if p == nil {
			continue
		}
		for _, imp := range p.Imports {
			if _, seen := prev[imp]; seen || (inModule && !g.isMine(imp)) {
				continue
			}
			prev[imp] = cur
			queue = append(queue, imp)
		}
	}
	return nil
}

func (g *graph) show(chain []string) string {
	parts := make([]string, len(chain))
	for i, p := range chain {
		if g.isMine(p) {
			parts[i] = g.rel(p)
		} else {
			parts[i] = p
		}
	}
	return strings.Join(parts, " -> ")
}

// result is what one rule found.
type result struct {
	rule       string   // its name, "(a)" ...
	unit       string   // what it checks: "pair", "package"
	violations []string // each names the offending import
	notes      []string // packages skipped because they do not exist
	checked    []string // what it looked at
}

func (g *graph) exists(rel string) bool { _, ok := g.pkgs[g.abs(rel)]; return ok }

func (g *graph) ruleApart() result {
	r := result{rule: "(a)", unit: "pair"}
	for _, pair := range apart {
		missing := false
		for _, rel := range pair {
			if !g.exists(rel) {
				r.notes = append(r.notes, rel+" does not exist (yet): skipped "+pair[0]+" <-> "+pair[1])
				missing = true
			}
		}
		if missing {
			continue
		}
		r.checked = append(r.checked, pair[0]+" <-> "+pair[1])
		for _, dir := range [][2]string{pair, {pair[1], pair[0]}} {
			if chain := g.path(g.abs(dir[0]), g.abs(dir[1]), true); chain != nil {
				r.violations = append(r.violations, fmt.Sprintf("%s imports %s: %s", dir[0], dir[1], g.show(chain)))
			}
		}
	}
	return r
}

func (g *graph) ruleTestTree() result {
	r := result{rule: "(b)", unit: "package"}
	for _, path := range g.mine {
		rel := g.rel(path)
		if under(rel, testTree) {
			continue
		}
		r.checked = append(r.checked, rel)
		for _, imp := range g.pkgs[path].Imports {
			if g.isMine(imp) && under(g.rel(imp), testTree) {
				r.violations = append(r.violations, fmt.Sprintf("%s imports %s", rel, g.rel(imp)))
			}
		}
	}
	return r
}

func matches(path string, patterns []string) bool {
	for _, pat := range patterns {
		if base, ok := strings.CutSuffix(pat, "/..."); ok {
			if path == base || strings.HasPrefix(path, base+"/") {
				return true
			}
		} else if path == pat {
			return true
		}
	}
	return false
}

// reason is one thing that makes a package impure.
type reason struct {
	what []string // the offending imports and names of clientPkg, or the deep dependency
	via  string   // the package of the module that has them, when not the package itself
	deep bool     // a package of denyDeep
	long string   // the whole sentence, naming the offending imports
}

// impurity lists why a package is not pure (empty when it is): one reason for each package of
// the module it reaches that imports what it may not, one for each name of clientPkg it uses
// beyond clientTypes, one for each package of denyDeep in its graph.
func (g *graph) impurity(path string) []reason {
	var why []reason
	reach := []string{path}
	for _, d := range g.pkgs[path].Deps {
		if g.isMine(d) {
			reach = append(reach, d)
		}
	}
	for _, q := range reach {
		var denied, uses []string
		p := g.pkgs[q]
		for _, imp := range p.Imports {
			if matches(imp, denyDirect) && !slices.Contains(denyExceptions, imp) {
				denied = append(denied, imp)
			}
			if imp == clientPkg {
				for _, u := range clientUses(p) {
					uses = append(uses, u.name+" ("+u.at+")")
				}
			}
		}
		if len(denied)+len(uses) == 0 {
			continue
		}
		var says []string
		if len(denied) > 0 {
			says = append(says, "imports "+strings.Join(denied, ", "))
		}
		if len(uses) > 0 {
			says = append(says, "uses "+strings.Join(uses, ", ")+" ("+clientPkg+" is allowed for "+
				strings.Join(prefixed("client.", clientTypes), ", ")+" only)")
		}
		r := reason{what: append(denied, uses...), long: g.rel(q) + " " + strings.Join(says, "; and ")}
		if q != path {
			r.via = g.rel(q)
			r.long = fmt.Sprintf("%s reaches %s (%s), which %s", g.rel(path), g.rel(q), g.show(g.path(path, q, true)), strings.Join(says, "; and "))
		}
		why = append(why, r)
	}
	for _, d := range g.pkgs[path].Deps {
		if slices.Contains(denyDeep, d) {
			why = append(why, reason{what: []string{d}, deep: true, long: fmt.Sprintf("%s depends on %s: %s", g.rel(path), d, g.show(g.path(path, d, false)))})
		}
	}
	return why
}

type use struct{ name, at string }

// clientUses reads a package's non-test .go files and returns, once each and sorted, every
// name of clientPkg it uses besides clientTypes, with where it is first used.
func clientUses(p *pkg) []use {
	seen := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range append(slices.Clone(p.GoFiles), p.CgoFiles...) {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			seen["(unparsable)"] = err.Error()
			continue
		}
		local := ""
		for _, spec := range f.Imports {
			if imp, _ := strconv.Unquote(spec.Path.Value); imp == clientPkg {
				local = "client"
				if spec.Name != nil {
					local = spec.Name.Name
				}
			}
		}
		switch local {
		case "", "_":
			continue
		case ".":
			seen["(a dot import)"] = name
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && !slices.Contains(clientTypes, sel.Sel.Name) {
				name := "client." + sel.Sel.Name
				if _, dup := seen[name]; !dup {
					pos := fset.Position(sel.Pos())
					seen[name] = fmt.Sprintf("%s:%d", filepath.Base(pos.Filename), pos.Line)
				}
			}
			return true
		})
	}
	var uses []use
	for name, at := range seen {
		uses = append(uses, use{name, at})
	}
	sort.Slice(uses, func(i, j int) bool { return uses[i].name < uses[j].name })
	return uses
}

func (g *graph) rulePure(pure []string) result {
	r := result{rule: "(c)", unit: "package"}
	for _, rel := range pure {
		if !g.exists(rel) {
			r.notes = append(r.notes, rel+" does not exist (yet): skipped")
			continue
		}
		r.checked = append(r.checked, rel)
		for _, why := range g.impurity(g.abs(rel)) {
			r.violations = append(r.violations, why.long)
		}
	}
	return r
}

func (g *graph) rules(pure []string) []result {
	return []result{g.ruleApart(), g.ruleTestTree(), g.rulePure(pure)}
}

var ruleText = map[string]string{
	"(a)": "controllers/computeplane and controllers/placement never import each other, directly or through other packages of the module.",
	"(b)": "no package outside test/ (cmd/ included) imports a package under test/; _test.go files may.",
	"(c)": "the pure packages do no I/O: no I/O import in them or the module's packages they reach, pkg/client for its types only, no I/O machinery anywhere below.",
}

func main() {
	out := flag.String("o", "docs/house.md", "the doc to write, relative to the module's root (- for stdout)")
	check := flag.Bool("check", false, "check the rules instead of writing the doc; exit 1 naming each offending import")
	pureFlag := flag.String("pure", "", "comma-separated packages (relative to the module's root) rule (c) checks instead of its own list")
	flag.Parse()
	g, err := load()
	if err != nil {
		fmt.Fprintln(os.Stderr, "house:", err)
		os.Exit(2)
	}
	pure := purePackages
	if *pureFlag != "" {
		pure = strings.Split(*pureFlag, ",")
	}
	if *check {
		os.Exit(report(os.Stdout, g.rules(pure)))
	}
	doc := g.doc()
	if *out == "-" {
		os.Stdout.WriteString(doc)
		return
	}
	file := filepath.Join(g.root, *out)
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "house:", err)
		os.Exit(2)
	}
	fmt.Printf("house: wrote %s (%d packages)\n", *out, len(g.mine))
}

// report prints each rule's outcome and returns the exit status.
func report(w io.Writer, results []result) int {
	status := 0
	for _, r := range results {
		for _, n := range r.notes {
			fmt.Fprintf(w, "house-check %s note: %s\n", r.rule, n)
		}
		for _, v := range r.violations {
			fmt.Fprintf(w, "house-check %s FAIL: %s\n", r.rule, v)
			status = 1
		}
		switch {
		case len(r.violations) > 0:
		case len(r.checked) == 0:
			fmt.Fprintf(w, "house-check %s skipped: %s (nothing to check yet)\n", r.rule, ruleText[r.rule])
		default:
			fmt.Fprintf(w, "house-check %s ok: %s (%s)\n", r.rule, ruleText[r.rule], countNoun(len(r.checked), r.unit))
		}
	}
	if status != 0 {
		fmt.Fprintln(w, "house-check: rules broken (docs/house.md, \"The rules\", says why each exists)")
	}
	return status
}

type stats struct{ files, lines, testFiles, testLines int }

func countLines(dir string, names []string) int {
	n := 0
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 1<<20), 1<<24)
		for s.Scan() {
			n++
		}
		f.Close()
	}
	return n
}

func nodeID(rel string) string {
	var b strings.Builder
	b.WriteString("p_")
	for _, r := range rel {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func top(rel string) string { t, _, _ := strings.Cut(rel, "/"); return t }

// doc renders docs/house.md.
func (g *graph) doc() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("<!-- Generated by `make house` (go run ./test/tools/house); do not edit. `make verify-generated` fails when it is stale. -->\n")
	w("# The house\n\n")
	w("Every package of `%s` and every import between them, read from `go list -json -deps ./...` ", g.module)
	w("for linux/amd64 with CGO_ENABLED=0 (the manager image's platform). Only non-test imports count: what a ")
	w("package's .go files import, not its _test.go files; packages with only _test.go files are in the table, ")
	w("not the drawing. Green packages are pure (rule (c)).\n\n")
	w("`make house` regenerates this file; `make house-check` (run by `make lint`) checks the rules.\n\n")
	drawn := []string{}
	for _, path := range g.mine {
		if len(g.pkgs[path].GoFiles)+len(g.pkgs[path].CgoFiles) > 0 {
			drawn = append(drawn, path)
		}
	}
	w("```mermaid\ngraph TD\n")
	groups := map[string][]string{}
	var order []string
	for _, path := range drawn {
		t := top(g.rel(path))
		if groups[t] == nil {
			order = append(order, t)
		}
		groups[t] = append(groups[t], path)
	}
	ids := map[string]string{}
	for _, t := range order {
		w("  subgraph d_%s[\"%s/\"]\n", strings.TrimPrefix(nodeID(t), "p_"), t)
		for _, path := range groups[t] {
			rel := g.rel(path)
			id := nodeID(rel)
			if other, dup := ids[id]; dup {
				panic("two packages draw as one node: " + other + ", " + rel)
			}
			ids[id] = rel
			w("    %s[\"%s\"]\n", id, rel)
		}
		w("  end\n")
	}
	var pure []string
	for _, path := range drawn {
		for _, imp := range g.pkgs[path].Imports {
			if g.isMine(imp) {
				w("  %s --> %s\n", nodeID(g.rel(path)), nodeID(g.rel(imp)))
			}
		}
		if len(g.impurity(path)) == 0 {
			pure = append(pure, nodeID(g.rel(path)))
		}
	}
	w("  classDef pure fill:#d8f0d8,stroke:#2e7d32\n")
	if len(pure) > 0 {
		w("  class %s pure\n", strings.Join(pure, ","))
	}
	w("```\n\n")

	w("## Packages\n\n")
	w("Files and lines are the package's own (.go) and its tests' (_test.go), for linux/amd64; generated files count.\n")
	w("\"I/O\" is rule (c) applied to every package: \"pure\", or the first reasons it is not.\n\n")
	w("| package | files | lines | test files | test lines | I/O |\n")
	w("| ------- | ----: | ----: | ---------: | ---------: | --- |\n")
	var total stats
	for _, path := range g.mine {
		p := g.pkgs[path]
		src := append(slices.Clone(p.GoFiles), p.CgoFiles...)
		tests := append(slices.Clone(p.TestGoFiles), p.XTestGoFiles...)
		s := stats{len(src), countLines(p.Dir, src), len(tests), countLines(p.Dir, tests)}
		total.files += s.files
		total.lines += s.lines
		total.testFiles += s.testFiles
		total.testLines += s.testLines
		state := "pure"
		if s.files == 0 {
			state = "(tests only)"
		} else if why := g.impurity(path); len(why) > 0 {
			state = "I/O: " + summarize(why)
		}
		w("| `%s` | %d | %d | %d | %d | %s |\n", g.rel(path), s.files, s.lines, s.testFiles, s.testLines, state)
	}
	w("| **%d packages** | %d | %d | %d | %d | |\n\n", len(g.mine), total.files, total.lines, total.testFiles, total.testLines)

	w("## The rules (`make house-check`)\n\n")
	w("- **(a)** %s The controllers meet through the API objects they write, not through each other's code.\n", ruleText["(a)"])
	w("- **(b)** %s The manager image's build context leaves test/ out (`.dockerignore`); this rule is what ", ruleText["(b)"])
	w("makes that safe, and `make image-context` checks that the manager builds from that context.\n")
	w("- **(c)** the pure packages, %s, do no I/O: they build and compare objects, and the packages that ", codeList(purePackages))
	w("talk to apiservers call them. A package is pure when\n")
	w("  1. neither it nor any package of the module it reaches imports one of %s ", codeList(denyDirect))
	w("(`/...`: and every package below it), except %s, and `%s` only for ", codeList(slices.DeleteFunc(slices.Clone(denyExceptions), func(e string) bool { return e == clientPkg })), clientPkg)
	w("%s: the tool reads the package's .go files, because holding a `client.Client` ", codeList(prefixed("client.", clientTypes)))
	w("or calling `client.New` is I/O through the same import; and\n")
	w("  2. its whole dependency graph, outside the module included, holds none of %s, ", codeList(denyDeep))
	w("the machinery that runs I/O loops. This list is short and exact because the Kubernetes API types alone ")
	w("reach `net/http` and `os` through apimachinery: \"nothing below imports net/http\" would make every ")
	w("package that names a Kubernetes type impure.\n\n")
	w("  The rule sees imports, not calls: it does not stop a pure package from printing with `fmt` or reading ")
	w("the clock, and an interface a caller passes in can hide anything. ")
	w("`go run ./test/tools/house -check -pure remote,ssa` shows what it says of other packages.\n\n")
	w("On this tree:\n\n")
	for _, r := range g.rules(purePackages) {
		switch {
		case len(r.violations) > 0:
			w("- %s is **broken** (%d):\n", r.rule, len(r.violations))
		case len(r.checked) == 0:
			w("- %s: nothing to check yet.\n", r.rule)
		default:
			w("- %s holds for %s.\n", r.rule, countNoun(len(r.checked), r.unit))
		}
		for _, v := range r.violations {
			w("  - %s\n", v)
		}
		for _, n := range r.notes {
			w("  - note: %s\n", n)
		}
	}
	return b.String()
}

func countNoun(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// summarize says in a table cell why a package is not pure: its own offending imports (the
// first few), the packages of the module through which it is not, and else its deep dependencies.
func summarize(why []reason) string {
	var own, via, deep []string
	for _, y := range why {
		switch {
		case y.deep:
			deep = append(deep, y.what...)
		case y.via != "":
			via = append(via, y.via)
		default:
			for _, w := range y.what {
				w, _, _ = strings.Cut(w, " (") // client.New (file.go:3) -> client.New
				own = append(own, w)
			}
		}
	}
	var parts []string
	if len(own) > 0 {
		parts = append(parts, firstFew(own))
	}
	if len(via) > 0 {
		parts = append(parts, "through "+codeList(via))
	}
	if len(parts) == 0 {
		parts = append(parts, "depends on "+firstFew(deep))
	}
	return strings.Join(parts, "; ")
}

func firstFew(items []string) string {
	if len(items) > 3 {
		return codeList(items[:3]) + fmt.Sprintf(" and %d more", len(items)-3)
	}
	return codeList(items)
}

func codeList(items []string) string {
	q := make([]string, len(items))
	for i, it := range items {
		q[i] = "`" + it + "`"
	}
	return strings.Join(q, ", ")
}

func prefixed(prefix string, items []string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = prefix + it
	}
	return out
}
