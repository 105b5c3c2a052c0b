package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLockOrderListsEveryMutex: DESIGN §Lock order calls itself the only
// list of locks, so every sync.Mutex or sync.RWMutex of the daemon and its
// libraries (struct fields as Type.field, package variables by name) must
// be named in it. tests/ (harnesses, benchmarks) is not listed.
func TestLockOrderListsEveryMutex(t *testing.T) {
	design, err := os.ReadFile(filepath.Join(root, "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(design), "\n## Lock order\n")
	if !ok {
		t.Fatal("DESIGN.md has no §Lock order")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	mutexes, err := findMutexes(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(mutexes) == 0 {
		t.Fatal("found no mutex: the scan is broken")
	}
	for name, at := range mutexes {
		if !strings.Contains(sec, name) {
			t.Errorf("%s (%s) is not in DESIGN §Lock order", name, at)
		}
	}
}

// findMutexes returns the mutexes declared in the non-test Go files under
// dir, outside tests/ and testdata/: name -> file:line.
func findMutexes(dir string) (map[string]string, error) {
	out := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			if rel == "tests" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		af, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for name, pos := range fileMutexes(af) {
			p := fset.Position(pos)
			out[name] = rel + ":" + strconv.Itoa(p.Line)
		}
		return nil
	})
	return out, err
}

// fileMutexes returns one file's mutexes: struct fields as Type.field (an
// embedded one as Type), package variables by name.
func fileMutexes(af *ast.File) map[string]token.Pos {
	out := map[string]token.Pos{}
	for _, decl := range af.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gd.Specs {
			switch spec := spec.(type) {
			case *ast.TypeSpec:
				if st, ok := spec.Type.(*ast.StructType); ok {
					for _, f := range st.Fields.List {
						if !isMutex(f.Type) {
							continue
						}
						if len(f.Names) == 0 {
							out[spec.Name.Name] = f.Pos()
						}
						for _, n := range f.Names {
							out[spec.Name.Name+"."+n.Name] = n.Pos()
						}
					}
				}
			case *ast.ValueSpec:
				embedded := hasEmbeddedMutex(spec.Type)
				for _, v := range spec.Values {
					if cl, ok := v.(*ast.CompositeLit); ok {
						embedded = embedded || hasEmbeddedMutex(cl.Type)
					}
				}
				if isMutex(spec.Type) || embedded {
					for _, n := range spec.Names {
						out[n.Name] = n.Pos()
					}
				}
			}
		}
	}
	return out
}

func isMutex(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "sync" && (sel.Sel.Name == "Mutex" || sel.Sel.Name == "RWMutex")
}

// hasEmbeddedMutex: an anonymous struct type with a mutex field (a
// package variable's type, or its value's: `var x = struct{ sync.Mutex; ... }{}`).
func hasEmbeddedMutex(e ast.Expr) bool {
	st, ok := e.(*ast.StructType)
	if !ok {
		return false
	}
	for _, f := range st.Fields.List {
		if isMutex(f.Type) {
			return true
		}
	}
	return false
}
