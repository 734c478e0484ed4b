package launcher

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The boundary between the launcher and everything else is frozen in three golden files, so a
// change to it is a visible diff in review, and a change to the launcher's code comes with a new
// launcher version:
//
//   - launcher/deps.txt: every package mesh-launcher links (std included), as tailscale's
//     depaware.txt;
//   - rollback/api.txt: rollback's exported API, which launchers and hosts of other versions
//     share through records.db and the process contract;
//   - launcher/version.sum: launcher.Version and the digest of the sources it links from this
//     module (with the versions of the other modules it links).
//
// `go test ./launcher -run TestLauncherBoundary -update` rewrites all three.
var update = flag.Bool("update", false, "rewrite launcher/deps.txt, rollback/api.txt and launcher/version.sum")

const updateCmd = "go test ./launcher -run TestLauncherBoundary -update"

// The platform the goldens describe: the launcher runs on Linux only, built as `make launcher`
// builds it; one GOARCH so that the list does not change with the machine running the test.
var boundaryEnv = []string{"GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0", "GOFLAGS=-mod=readonly"}

const (
	mainModule  = "github.com/novox/mesh-host"
	launcherCmd = "./launcher/cmd/mesh-launcher"
)

func TestLauncherBoundary(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := listDeps(t, root)

	t.Run("deps", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("# Every package mesh-launcher links (go list -deps " + launcherCmd + ", GOOS=linux GOARCH=amd64\n")
		b.WriteString("# CGO_ENABLED=0), std included. Checked by launcher/boundary_test.go; rewrite with\n# " + updateCmd + "\n")
		for _, p := range pkgs {
			b.WriteString(p.ImportPath + "\n")
		}
		golden(t, filepath.Join(root, "launcher", "deps.txt"), b.String(),
			"the packages mesh-launcher links changed; review them (the launcher stays small and links no network code beyond sd_notify's socket)")
	})

	t.Run("api", func(t *testing.T) {
		api, err := exportedAPI(filepath.Join(root, "rollback"))
		if err != nil {
			t.Fatal(err)
		}
		golden(t, filepath.Join(root, "rollback", "api.txt"),
			"# rollback's exported API: what launchers and hosts of every version share. Checked by\n# launcher/boundary_test.go; rewrite with "+updateCmd+"\n"+api,
			"rollback's exported API changed; launchers and hosts of other versions meet this code through records.db and the process contract, so keep changes additive")
	})

	t.Run("version", func(t *testing.T) {
		want := sourcesSum(t, root, pkgs)
		path := filepath.Join(root, "launcher", "version.sum")
		if *update {
			writeGolden(t, path, want.String())
			return
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			t.Fatalf("launcher/version.sum is missing; run %s", updateCmd)
		}
		if err != nil {
			t.Fatal(err)
		}
		got := parseSum(string(b))
		switch {
		case got.digest == want.digest && got.version == want.version:
		case got.digest != want.digest && got.version == Version:
			t.Errorf("the launcher's code changed since launcher %s was recorded (launcher/version.sum):\n%s\nbump launcher.Version in launcher/version.go, add it to CHANGELOG.md's \"Launcher versions\", and run %s",
				Version, diffLines(got.lines, want.lines), updateCmd)
		default:
			t.Errorf("launcher/version.sum records launcher %s, but launcher.Version is %s; add %s to CHANGELOG.md's \"Launcher versions\" and run %s",
				got.version, Version, Version, updateCmd)
		}
	})

	t.Run("changelog", func(t *testing.T) {
		versions, err := changelogLauncherVersions(filepath.Join(root, "CHANGELOG.md"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(versions, Version) {
			t.Errorf("CHANGELOG.md's \"Launcher versions\" list (%v) does not name launcher.Version %s; add a line \"- %s: what changed\"", versions, Version, Version)
		}
	})
}

// listedPackage is what `go list -json` says of one package, the fields used here.
type listedPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	GoFiles    []string
	EmbedFiles []string
	Module     *struct {
		Path, Version string
		Main          bool
	}
}

func listDeps(t *testing.T, root string) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,Standard,GoFiles,EmbedFiles,Module", launcherCmd)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), boundaryEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", launcherCmd, err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list's output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b listedPackage) int { return strings.Compare(a.ImportPath, b.ImportPath) })
	if len(pkgs) < 20 {
		t.Fatalf("go list -deps listed %d packages; expected the launcher's and std's", len(pkgs))
	}
	return pkgs
}

// golden compares want with the file at path, or writes it with -update.
func golden(t *testing.T, path, want, what string) {
	t.Helper()
	if *update {
		writeGolden(t, path, want)
		return
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s is missing; run %s", path, updateCmd)
	}
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Errorf("%s: %s:\n%s\nif that is intended, run %s and commit the file", filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), what,
			diffLines(strings.Split(string(b), "\n"), strings.Split(want, "\n")), updateCmd)
	}
}

func writeGolden(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

// diffLines says which lines were removed (-) and added (+), ignoring order.
func diffLines(old, new []string) string {
	var b strings.Builder
	for _, l := range old {
		if l != "" && !slices.Contains(new, l) {
			b.WriteString("  - " + l + "\n")
		}
	}
	for _, l := range new {
		if l != "" && !slices.Contains(old, l) {
			b.WriteString("  + " + l + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// sum is launcher/version.sum: the version, and the digest of its lines (one per source file
// of this module the launcher links, one per other module).
type sum struct {
	version, digest string
	lines           []string
}

func (s sum) String() string {
	return "# launcher/version.sum: the launcher version these sources belong to, and the sha256 of each\n" +
		"# .go (and embedded) file of this module mesh-launcher links (GOOS=linux GOARCH=amd64\n" +
		"# CGO_ENABLED=0) with the other modules it links. Changing them means a new launcher version:\n" +
		"# bump launcher.Version in launcher/version.go, add it to CHANGELOG.md's \"Launcher versions\",\n" +
		"# and run " + updateCmd + "\n" +
		"version " + s.version + "\n" +
		"digest " + s.digest + "\n" +
		strings.Join(s.lines, "\n") + "\n"
}

func sourcesSum(t *testing.T, root string, pkgs []listedPackage) sum {
	t.Helper()
	var lines []string
	modules := map[string]bool{}
	for _, p := range pkgs {
		if p.Standard || p.Module == nil {
			continue
		}
		if !p.Module.Main {
			modules["module "+p.Module.Path+" "+p.Module.Version] = true
			continue
		}
		for _, name := range append(slices.Clone(p.GoFiles), p.EmbedFiles...) {
			path := filepath.Join(p.Dir, name)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.Sum256(b)
			lines = append(lines, "file "+hex.EncodeToString(h[:])+" "+filepath.ToSlash(rel))
		}
	}
	if len(lines) == 0 {
		t.Fatal("no source file of this module is linked into mesh-launcher; go list's output was not understood")
	}
	slices.SortFunc(lines, func(a, b string) int {
		return strings.Compare(a[strings.LastIndexByte(a, ' '):], b[strings.LastIndexByte(b, ' '):])
	})
	mods := make([]string, 0, len(modules))
	for m := range modules {
		mods = append(mods, m)
	}
	slices.Sort(mods)
	lines = append(lines, mods...)
	h := sha256.Sum256([]byte(strings.Join(lines, "\n") + "\n"))
	return sum{version: Version, digest: "sha256:" + hex.EncodeToString(h[:]), lines: lines}
}

func parseSum(s string) sum {
	var out sum
	for _, line := range strings.Split(s, "\n") {
		switch {
		case strings.HasPrefix(line, "#"), line == "":
		case strings.HasPrefix(line, "version "):
			out.version = strings.TrimPrefix(line, "version ")
		case strings.HasPrefix(line, "digest "):
			out.digest = strings.TrimPrefix(line, "digest ")
		default:
			out.lines = append(out.lines, line)
		}
	}
	return out
}

// changelogLauncherVersions returns the versions listed under CHANGELOG.md's heading that
// says "Launcher versions": the lines "- vX.Y.Z…" until the next heading.
func changelogLauncherVersions(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var versions []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			in = strings.Contains(strings.ToLower(line), "launcher versions")
			continue
		}
		if !in {
			continue
		}
		item, ok := strings.CutPrefix(strings.TrimSpace(line), "- ")
		if !ok {
			continue
		}
		v := strings.Trim(strings.FieldsFunc(item, func(r rune) bool { return r == ' ' || r == ':' || r == ',' })[0], "`*[]")
		versions = append(versions, v)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if versions == nil {
		return nil, fmt.Errorf("%s has no \"Launcher versions\" heading with a list of versions under it", path)
	}
	return versions, nil
}

// exportedAPI lists the exported API of the package in dir, as Linux builds it: one line per
// constant, variable, function, type, method and exported field, sorted by name, with
// signatures' parameter names left out (they are not API).
func exportedAPI(dir string) (string, error) {
	ctx := build.Default
	ctx.GOOS, ctx.GOARCH, ctx.CgoEnabled = "linux", "amd64", false
	bp, err := ctx.ImportDir(dir, 0)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	type entry struct{ key, line string }
	var entries []entry
	add := func(key, line string) { entries = append(entries, entry{key, line}) }
	expr := func(e ast.Expr) string {
		var b bytes.Buffer
		printer.Fprint(&b, fset, e)
		return strings.Join(strings.Fields(b.String()), " ")
	}
	fields := func(fl *ast.FieldList) string {
		if fl == nil {
			return ""
		}
		var parts []string
		for _, f := range fl.List {
			for range max(len(f.Names), 1) {
				parts = append(parts, expr(f.Type))
			}
		}
		return strings.Join(parts, ", ")
	}
	sig := func(ft *ast.FuncType) string {
		s := "(" + fields(ft.Params) + ")"
		switch r := fields(ft.Results); {
		case r == "":
		case ft.Results.NumFields() == 1:
			s += " " + r
		default:
			s += " (" + r + ")"
		}
		return s
	}
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			return "", err
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					add(d.Name.Name, "func "+d.Name.Name+sig(d.Type))
					continue
				}
				recv := expr(d.Recv.List[0].Type)
				base := strings.TrimPrefix(recv, "*")
				if !ast.IsExported(base) {
					continue
				}
				add(base+"."+d.Name.Name, "func ("+recv+") "+d.Name.Name+sig(d.Type))
			case *ast.GenDecl:
				var lastType, lastValues string
				for i, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						switch ty := s.Type.(type) {
						case *ast.StructType:
							add(s.Name.Name, "type "+s.Name.Name+" struct")
							for _, fl := range ty.Fields.List {
								names := fl.Names
								if names == nil { // embedded
									names = []*ast.Ident{ast.NewIdent(strings.TrimPrefix(expr(fl.Type), "*"))}
								}
								for _, n := range names {
									if ast.IsExported(n.Name[strings.LastIndexByte(n.Name, '.')+1:]) {
										add(s.Name.Name+"."+n.Name, "field "+s.Name.Name+"."+n.Name+" "+expr(fl.Type))
									}
								}
							}
						case *ast.InterfaceType:
							add(s.Name.Name, "type "+s.Name.Name+" interface")
							for _, m := range ty.Methods.List {
								if ft, ok := m.Type.(*ast.FuncType); ok {
									add(s.Name.Name+"."+m.Names[0].Name, "method "+s.Name.Name+"."+m.Names[0].Name+sig(ft))
								} else {
									add(s.Name.Name+"."+expr(m.Type), "embeds "+s.Name.Name+" "+expr(m.Type))
								}
							}
						default:
							eq := " "
							if s.Assign.IsValid() {
								eq = " = "
							}
							add(s.Name.Name, "type "+s.Name.Name+eq+expr(s.Type))
						}
					case *ast.ValueSpec:
						typ, values := "", ""
						if s.Type != nil {
							typ = " " + expr(s.Type)
						}
						if d.Tok == token.CONST && s.Type == nil && s.Values == nil {
							typ, values = lastType, lastValues // iota repeated
						}
						for j, n := range s.Names {
							if !n.IsExported() {
								continue
							}
							line := d.Tok.String() + " " + n.Name
							value := values
							if s.Values != nil {
								value = expr(s.Values[min(j, len(s.Values)-1)])
							}
							switch {
							case value == "iota":
								line += typ + fmt.Sprintf(" = %d", i)
							case value != "" && s.Values == nil:
								line += typ + " = " + value + fmt.Sprintf(" (iota %d)", i)
							case value != "":
								line += typ + " = " + value
							default:
								line += typ
							}
							add(n.Name, line)
						}
						if s.Values != nil {
							lastType, lastValues = typ, expr(s.Values[0])
						}
					}
				}
			}
		}
	}
	slices.SortStableFunc(entries, func(a, b entry) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return strings.Compare(a.line, b.line)
	})
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e.line + "\n")
	}
	return b.String(), nil
}
