package testutil

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSkipPolicy walks every _test.go file of the module and fails on a
// Skip, Skipf or SkipNow call outside this package: a test skips only
// through the helpers of skip.go, which skip when something is missing and
// fail on anything else.
func TestSkipPolicy(t *testing.T) {
	root := moduleRoot(t)
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			if path == self {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		for _, pos := range directSkips(t, path) {
			rel, _ := filepath.Rel(root, pos.Filename)
			t.Errorf("%s:%d: a direct %s: skip through a helper of internal/testutil/skip.go", rel, pos.Line, pos.Method)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked %d test files under %s: not the module", files, root)
	}
}

// skipCall is a position and the name of the Skip method called there.
type skipCall struct {
	token.Position
	Method string
}

// directSkips returns the Skip, Skipf and SkipNow method calls in the file.
func directSkips(t *testing.T, path string) []skipCall {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []skipCall
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		switch sel.Sel.Name {
		case "Skip", "Skipf", "SkipNow":
			out = append(out, skipCall{fset.Position(call.Pos()), sel.Sel.Name})
		}
		return true
	})
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// TestSkipPolicyFinds: the walk finds a direct skip in any form.
func TestSkipPolicyFinds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x_test.go")
	src := `package x
func TestA(t *testing.T) { if cond { t.Skip("why") }; b.Skipf("%v", 1); tb.SkipNow(); testutil.SkipIfShort(t, "") }`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := directSkips(t, path)
	if len(got) != 3 || got[0].Method != "Skip" || got[1].Method != "Skipf" || got[2].Method != "SkipNow" {
		t.Fatalf("found %v, want the three direct skips and not the helper", got)
	}
}
