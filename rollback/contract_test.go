package rollback

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// contractWords are the command words of contract.go.
var contractWords = []string{CmdRun, CmdPreflight, CmdVersion}

// contractLiterals returns where src (one Go file) spells a piece of the launcher↔host contract
// by hand instead of using contract.go's names: a string that is one of the variables (or
// starts "NAME="), or a command word given to exec.Command, as a []string element, as a
// command's Name or as a flag set's name.
func contractLiterals(fset *token.FileSet, name string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, err
	}
	var found []string
	say := func(n ast.Node, what string) {
		found = append(found, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), what))
	}
	word := func(e ast.Expr) (string, bool) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(lit.Value)
		return s, err == nil && slices.Contains(contractWords, s)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.BasicLit:
			if x.Kind != token.STRING {
				break
			}
			s, err := strconv.Unquote(x.Value)
			if err != nil {
				break
			}
			for _, env := range EnvContract {
				if s == env || strings.HasPrefix(s, env+"=") {
					say(x, fmt.Sprintf("%q spells %s; use rollback.Env…", s, env))
				}
			}
		case *ast.CallExpr:
			sel, ok := x.Fun.(*ast.SelectorExpr)
			if !ok {
				break
			}
			switch sel.Sel.Name {
			case "Command", "CommandContext":
				for _, a := range x.Args {
					if w, ok := word(a); ok {
						say(a, fmt.Sprintf("the command word %q given to exec.%s; use rollback.Cmd…", w, sel.Sel.Name))
					}
				}
			case "NewFlagSet", "NewFlagSetWithOperands":
				if len(x.Args) > 0 {
					if w, ok := word(x.Args[0]); ok {
						say(x.Args[0], fmt.Sprintf("the command word %q names a flag set; use rollback.Cmd…", w))
					}
				}
			}
		case *ast.CompositeLit:
			for _, el := range x.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
						if w, ok := word(kv.Value); ok {
							say(kv.Value, fmt.Sprintf("the command word %q names a command; use rollback.Cmd…", w))
						}
					}
					continue
				}
				if arr, ok := x.Type.(*ast.ArrayType); ok {
					if id, ok := arr.Elt.(*ast.Ident); ok && id.Name == "string" {
						if w, ok := word(el); ok {
							say(el, fmt.Sprintf("the command word %q in a command line; use rollback.Cmd…", w))
						}
					}
				}
			}
		}
		return true
	})
	return found, nil
}

func TestContractLiteralsAreFound(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		found     int
	}{
		{"a variable spelled out", `package p; var _ = os.Getenv("MESH_HOST_ROOT")`, 1},
		{"a variable set by hand", `package p; var _ = "MESH_HOST_START_ID=" + id`, 1},
		{"a command word given to exec", `package p; var _ = exec.Command(bin, "preflight")`, 1},
		{"a command word in an argument list", `package p; var _ = append([]string{"preflight"}, args...)`, 1},
		{"a command named by hand", `package p; var _ = cmdline.Command{Name: "run"}`, 1},
		{"a flag set named by hand", `package p; var _ = prog.NewFlagSet("run", "help")`, 1},
		{"help text naming a variable passes", `package p; var _ = "the root (MESH_HOST_ROOT; default /var/lib/mesh-host)"`, 0},
		{"another MESH_HOST_ setting passes", `package p; var _ = os.Getenv("MESH_HOST_NODE")`, 0},
		{"the word version as a log key passes", `package p; var _ = log.With("version", v)`, 0},
		{"the contract's names pass", `package p; var _ = exec.Command(bin, rollback.CmdRun); var _ = rollback.EnvRoot + "=" + root`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found, err := contractLiterals(token.NewFileSet(), "p.go", tc.src)
			if err != nil {
				t.Fatal(err)
			}
			if len(found) != tc.found {
				t.Errorf("found %d, want %d: %q", len(found), tc.found, found)
			}
		})
	}
}

// The launcher↔host contract is spelled once, in contract.go: no non-test file of the launcher
// or the host types a variable's name or a command word by hand (test fixtures under testdata/
// are other programs, built apart, and may).
func TestContractIsSpelledOnlyInContractGo(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	for _, dir := range []string{"../launcher", "../host", "."} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == "contract.go" {
				return nil
			}
			files++
			found, err := contractLiterals(fset, path, nil)
			if err != nil {
				return err
			}
			for _, f := range found {
				t.Errorf("%s (the launcher↔host contract is defined once, in rollback/contract.go)", f)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 50 {
		t.Fatalf("scanned %d files; expected the launcher's and the host's sources", files)
	}
}
