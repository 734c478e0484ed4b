package lab

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/novox/mesh-host/wire/meshtest"
)

// The launcher has no network code: nothing from NATS, the link, or net/http may be linked in.
// (go-systemd's sd_notify and journal use unix datagram sockets through package net; that is the
// one exception, and it never leaves the machine.)
func TestLauncherLinksNoNetworkCode(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", PkgLauncher)
	cmd.Dir = bins.Src
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/nats-io/", "/host/link", "/host/deliver", "net/http", "crypto/tls"} {
			if strings.Contains(dep, banned) {
				t.Errorf("mesh-launcher depends on %s", dep)
			}
		}
	}
}

// Each top-level directory has one job and the arrows run one way: the bus contract lives in
// wire/, which both sides import, so the release side needs nothing of the host's; the host and
// the launcher talk only through disk (rollback/), which the release side never links: rollback/
// holds only what the launcher and the host share; internal/ holds the leaves every side shares.
func TestPackagesImportOnlyWhatTheirJobNeeds(t *testing.T) {
	for _, tc := range []struct {
		pkgs   string
		banned []string
	}{
		{"./release/...", []string{"/mesh-host/host", "/mesh-host/launcher", "/mesh-host/rollback"}},
		{"./wire/...", []string{"/mesh-host/host", "/mesh-host/launcher", "/mesh-host/release", "/mesh-host/lab", "/mesh-host/rollback"}},
		// The contract itself is JSON and names: no NATS. Only the bus's layout (wire/buslayout,
		// made with the client) and the tests' bus (wire/meshtest, checked below) speak NATS.
		{"./wire ./wire/archive ./wire/delta", []string{"github.com/nats-io/"}},
		{"./wire/buslayout", []string{"github.com/nats-io/nats-server", "github.com/nats-io/jwt"}},
		// Prometheus's client is the release side's (mesh-release metrics): nodes listen on nothing.
		{"./host/...", []string{"/mesh-host/launcher", "/mesh-host/release", "/mesh-host/lab", "github.com/prometheus/"}},
		{"./launcher/...", []string{"/mesh-host/host", "/mesh-host/release", "/mesh-host/lab", "/mesh-host/wire", "github.com/prometheus/"}},
		// chromedp drives the browser in lab/'s tests only: no package, so no binary
		// (mesh-release, mesh-host, mesh-launcher), links it.
		{"./release/... ./host/... ./launcher/... ./rollback/... ./wire/... ./internal/... ./lab", []string{"github.com/chromedp/"}},
		{"./rollback/...", []string{"/mesh-host/host", "/mesh-host/launcher", "/mesh-host/release", "/mesh-host/lab", "/mesh-host/wire"}},
		// The arrow between wire/ and internal/ runs one way: the contract uses internal/'s
		// plumbing (the version rule, bounded text, ctxio), so nothing in internal/ imports wire/.
		// What spoke the contract moved up beside it: wire/buslayout and wire/meshtest.
		{"./internal/...", []string{"/mesh-host/wire"}},
		// The leaves everyone shares (the version rule, the SQLite and atomic-write plumbing,
		// the command-line rule, the file lock) carry no weight: nothing of the module above them, and no
		// network code.
		{"./internal/layout ./internal/sqlitefile ./internal/atomicfile ./internal/cmdline ./internal/ctxio ./internal/filelock ./internal/text", []string{"/mesh-host/host", "/mesh-host/launcher", "/mesh-host/release", "/mesh-host/lab", "/mesh-host/wire", "/mesh-host/rollback", "github.com/nats-io/", "net/http"}},
	} {
		t.Run(tc.pkgs, func(t *testing.T) {
			cmd := exec.Command("go", append([]string{"list", "-deps"}, strings.Fields(tc.pkgs)...)...)
			cmd.Dir = bins.Src
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, banned := range tc.banned {
					if strings.Contains(dep, banned) {
						t.Errorf("%s depends on %s", tc.pkgs, dep)
					}
				}
			}
		})
	}
}

// wire/meshtest is test support: only _test.go files import it, so no package of the module,
// and no binary, depends on it. (`go list` without -test leaves test imports out.)
func TestTestSupportIsImportedOnlyByTests(t *testing.T) {
	const meshtest = "github.com/novox/mesh-host/wire/meshtest"
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	cmd.Dir = bins.Src
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	listed := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, " ")
		if pkg == meshtest {
			listed = true
			continue
		}
		for _, dep := range strings.Fields(deps) {
			if dep == meshtest {
				t.Errorf("%s depends on %s; only tests may import it", pkg, meshtest)
			}
		}
	}
	if !listed {
		t.Errorf("go list ./... did not list %s; this test checks nothing", meshtest)
	}
}

// No built binary is committed (a 3 MB mesh-release once was): binaries are made by `make build`
// into bin/, which .gitignore keeps out, as it does the lab's and the tests' outputs.
func TestNoBinaryIsCommitted(t *testing.T) {
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = bins.Src
	out, err := cmd.Output()
	if err != nil {
		meshtest.SkipUnlessCI(t, "not a git checkout: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		f, err := os.Open(filepath.Join(bins.Src, name))
		if err != nil {
			continue // deleted in the working tree
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		f.Close()
		if string(head[:n]) == "\x7fELF" {
			t.Errorf("%s is a compiled binary; build it with make build instead of committing it", name)
		}
	}
}

// treePackages parses every package of the tree (non-test files, outside testdata and hidden
// directories), with comments, keyed by its directory relative to the tree.
func treePackages(t *testing.T) (*token.FileSet, map[string][]*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs := map[string][]*ast.File{}
	err := filepath.WalkDir(bins.Src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != bins.Src && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(bins.Src, filepath.Dir(path))
		pkgs[rel] = append(pkgs[rel], f)
		return nil
	})
	if err != nil {
		t.Fatalf("reading the tree: %v", err)
	}
	if len(pkgs) < 50 {
		t.Fatalf("found %d packages under %s; this test checks too little", len(pkgs), bins.Src)
	}
	return fset, pkgs
}

// A package comment says the package's job first, in at most 20 words, as go-systemd's and
// tableflip's do; the detail follows after (STYLE.md, "Short first sentences").
func TestPackageCommentsOpenWithTheJobInTwentyWords(t *testing.T) {
	const maxWords = 20
	_, pkgs := treePackages(t)
	dirs := make([]string, 0, len(pkgs))
	for dir := range pkgs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		var text string
		for _, f := range pkgs[dir] {
			if f.Doc != nil {
				text = f.Doc.Text()
				break
			}
		}
		if text == "" {
			t.Errorf("%s: no package comment; open one with the package's job in at most %d words", dir, maxWords)
			continue
		}
		first := new(doc.Package).Synopsis(text)
		if n := len(strings.Fields(first)); n > maxWords {
			t.Errorf("%s: the package comment's first sentence is %d words; say the job in at most %d, detail after:\n\t%s", dir, n, maxWords, first)
		}
	}
}

// Settings are filled one way (decision 0041): a struct whose zero fields mean "the default",
// filled by its one withDefaults method (WithDefaults where another package needs the filled
// value), the values named once as Default* constants. So no
// other function fills a field it finds zero, no function option sets a setting, and no
// Default*() constructor makes a filled struct (the zero struct is the default).
func TestSettingsAreDefaultedOneWay(t *testing.T) {
	fset, pkgs := treePackages(t)
	var found []string
	at := func(n ast.Node, format string, args ...any) {
		p := fset.Position(n.Pos())
		rel, _ := filepath.Rel(bins.Src, p.Filename)
		found = append(found, fmt.Sprintf("%s:%d: %s", rel, p.Line, fmt.Sprintf(format, args...)))
	}
	for _, files := range pkgs {
		for _, f := range files {
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						ts, ok := spec.(*ast.TypeSpec)
						if !ok {
							continue
						}
						if ft, ok := ts.Type.(*ast.FuncType); ok && isOptionFunc(ft) && !functionOptionsAllowed[ts.Name.Name] {
							at(ts, "%s is a function option; take a settings struct whose zero fields mean the default", ts.Name.Name)
						}
					}
				case *ast.FuncDecl:
					if d.Body == nil {
						continue
					}
					if d.Recv == nil && strings.HasPrefix(d.Name.Name, "Default") && d.Type.Params.NumFields() == 0 && returnsStruct(d.Type) {
						at(d, "%s makes a filled struct; let the zero struct mean the default (withDefaults)", d.Name.Name)
					}
					if fillsDefaults.MatchString(d.Name.Name) {
						continue
					}
					settings := settingsParams(d)
					ast.Inspect(d.Body, func(n ast.Node) bool {
						if field, ok := fillsZeroField(n); ok && settings[strings.Split(field, ".")[0]] {
							at(n, "%s fills %s when it is zero; fill it in the settings' withDefaults", funcName(d), field)
						}
						return true
					})
				}
			}
		}
	}
	sort.Strings(found)
	for _, f := range found {
		t.Errorf("%s (decision 0041)", f)
	}
}

// fillsDefaults names the methods that fill settings: withDefaults (WithDefaults), and a
// variant for what only a test can fill (withTestDefaults, given the test's temp dir and log).
var fillsDefaults = regexp.MustCompile(`^[wW]ith[A-Za-z]*Defaults$`)

// settingsParams are fn's receiver and parameters whose type is a settings struct: one named
// *Config, *Options, *Opts or *Limits.
func settingsParams(fn *ast.FuncDecl) map[string]bool {
	out := map[string]bool{}
	var fields []*ast.Field
	if fn.Recv != nil {
		fields = append(fields, fn.Recv.List...)
	}
	fields = append(fields, fn.Type.Params.List...)
	for _, f := range fields {
		typ := f.Type
		if st, ok := typ.(*ast.StarExpr); ok {
			typ = st.X
		}
		name := exprString(typ)
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			name = name[i+1:]
		}
		for _, suffix := range []string{"Config", "Options", "Opts", "Limits"} {
			if strings.HasSuffix(name, suffix) {
				for _, n := range f.Names {
					out[n.Name] = true
				}
			}
		}
	}
	return out
}

// functionOptionsAllowed are the function options left: bus.ConnectOption adds to nats.go's own
// list of options (TLS, reconnecting for ever), a set that keeps growing; meshtest.BusOption is
// test support not yet converted to a BusConfig (twelve call sites in the sides' tests).
var functionOptionsAllowed = map[string]bool{"ConnectOption": true, "BusOption": true}

// isOptionFunc reports whether ft is func(*T) with no result: the shape of a function option.
func isOptionFunc(ft *ast.FuncType) bool {
	if ft.Results.NumFields() != 0 || ft.Params.NumFields() != 1 {
		return false
	}
	_, ok := ft.Params.List[0].Type.(*ast.StarExpr)
	return ok
}

// returnsStruct reports whether ft returns one value of a named type (not a basic one).
func returnsStruct(ft *ast.FuncType) bool {
	if ft.Results.NumFields() != 1 {
		return false
	}
	id, ok := ft.Results.List[0].Type.(*ast.Ident)
	return ok && id.Obj != nil
}

// fillsZeroField reports whether n is `if x.F == zero { x.F = ... }` (or `<= 0`), alone: a
// default filled where it is used.
func fillsZeroField(n ast.Node) (string, bool) {
	is, ok := n.(*ast.IfStmt)
	if !ok || is.Init != nil || is.Else != nil || len(is.Body.List) != 1 {
		return "", false
	}
	cond, ok := is.Cond.(*ast.BinaryExpr)
	if !ok || (cond.Op != token.EQL && cond.Op != token.LEQ) {
		return "", false
	}
	sel, ok := cond.X.(*ast.SelectorExpr)
	if !ok || !isZero(cond.Y) {
		return "", false
	}
	as, ok := is.Body.List[0].(*ast.AssignStmt)
	if !ok || as.Tok != token.ASSIGN || len(as.Lhs) != 1 {
		return "", false
	}
	if exprString(as.Lhs[0]) != exprString(sel) {
		return "", false
	}
	return exprString(sel), true
}

func isZero(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.BasicLit:
		return x.Value == "0" || x.Value == `""`
	case *ast.Ident:
		return x.Name == "nil"
	}
	return false
}

func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	}
	return ""
}

// funcName is fn's name as a reader finds it: Type.Method or Func.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}

// A function outside the lab longer than 80 lines hands off to named phases, one small handler
// per event (STYLE.md, "Long functions hand off"); where it is right as one, its doc comment says
// why on a line starting "long:", so the length is a decision and not a drift.
func TestLongFunctionsSayWhyTheyAreLong(t *testing.T) {
	const maxLines = 80
	fset, pkgs := treePackages(t)
	var found []string
	for dir, files := range pkgs {
		if dir == "lab" || strings.HasPrefix(dir, "lab"+string(filepath.Separator)) {
			continue
		}
		for _, f := range files {
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
				lines := end.Line - start.Line + 1
				if lines <= maxLines || saysWhyLong(fn.Doc) {
					continue
				}
				rel, _ := filepath.Rel(bins.Src, start.Filename)
				found = append(found, fmt.Sprintf("%s:%d: %s is %d lines", rel, start.Line, funcName(fn), lines))
			}
		}
	}
	sort.Strings(found)
	for _, f := range found {
		t.Errorf("%s; split it into named phases, or say why it is one in a doc comment line \"long: <reason>\"", f)
	}
}

// saysWhyLong reports whether doc has a line "long: <reason>" with a reason of a few words.
func saysWhyLong(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, line := range strings.Split(doc.Text(), "\n") {
		if reason, ok := strings.CutPrefix(strings.TrimSpace(line), "long:"); ok && len(strings.Fields(reason)) >= 3 {
			return true
		}
	}
	return false
}
