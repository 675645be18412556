package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function may be, from `func` to its
// closing brace: a longer one reads better as named steps.
const maxFuncLines = 150

// lengthChecked are the folders (with their subfolders) whose functions
// are held to maxFuncLines.
var lengthChecked = []string{"train", "evaluate", "rollout", "env"}

// repoRoot is the module's root folder: two up from this file.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// longFuncs lists the functions of the Go files under dir (tests aside)
// that are over max lines, as "path:line name (n lines)" with path
// relative to root.
func longFuncs(root, dir string, max int) ([]string, error) {
	var out []string
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
			if n := end - start + 1; n > max {
				name := fn.Name.Name
				if fn.Recv != nil && len(fn.Recv.List) == 1 {
					name = fmt.Sprintf("(%s).%s", recvType(fn.Recv.List[0].Type), name)
				}
				out = append(out, fmt.Sprintf("%s:%d %s (%d lines)", filepath.ToSlash(rel), start, name, n))
			}
		}
		return nil
	})
	return out, err
}

// recvType renders a receiver's type: T, *T or T[...].
func recvType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return "*" + recvType(x.X)
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		return recvType(x.X)
	case *ast.IndexListExpr:
		return recvType(x.X)
	}
	return "?"
}

func TestFunctionLength(t *testing.T) {
	root := repoRoot(t)
	for _, dir := range lengthChecked {
		long, err := longFuncs(root, dir, maxFuncLines)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range long {
			t.Errorf("%s: over %d lines; split it into named steps", l, maxFuncLines)
		}
	}
}

// The counter itself, on a made-up package.
func TestLongFuncs(t *testing.T) {
	root := t.TempDir()
	src := "package p\n\nfunc short() {}\n\n// long is long.\nfunc (x *T) long() {\n" + strings.Repeat("\t_ = 1\n", 8) + "}\n"
	writeFile(t, filepath.Join(root, "p", "p.go"), src)
	writeFile(t, filepath.Join(root, "p", "p_test.go"), "package p\n\nfunc TestX() {\n"+strings.Repeat("\t_ = 1\n", 20)+"}\n")
	got, err := longFuncs(root, "p", 9)
	if err != nil {
		t.Fatal(err)
	}
	if want := "p/p.go:6 (*T).long (10 lines)"; len(got) != 1 || got[0] != want {
		t.Errorf("got %q, want [%q]", got, want)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
