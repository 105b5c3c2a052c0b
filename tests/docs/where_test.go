// Package docs_test checks that the documents name code that exists: each
// DESIGN.md section's "Where in the code:" line names files that exist and,
// in them, functions, types and methods that are defined there.
package docs_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository, from this package's directory.
const root = "../.."

// whereLead starts the line (DESIGN.md's own convention) that names a
// section's code: backquoted paths, each followed by backquoted names
// defined in it ("Name", "Type.Method").
const whereLead = "Where in the code:"

// section is a DESIGN.md section: its heading, the line the heading is
// on, whether it has text of its own (not only subsections), and its
// "Where in the code" paragraph (joined lines) with its first line number.
type section struct {
	title     string
	line      int
	hasText   bool
	where     string
	whereLine int
}

// TestDesignWhereInCode: every DESIGN.md section with text of its own has
// a "Where in the code:" line, and what it names exists.
func TestDesignWhereInCode(t *testing.T) {
	secs, err := sections(filepath.Join(root, "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	decls := map[string]map[string]bool{} // file -> names defined in it
	for _, s := range secs {
		if s.where == "" {
			if s.hasText {
				t.Errorf("DESIGN.md:%d §%s has no %q line", s.line, s.title, whereLead)
			}
			continue
		}
		for _, p := range checkWhere(s.where, decls) {
			t.Errorf("DESIGN.md:%d (§%s): %s", s.whereLine, s.title, p)
		}
	}
}

// sections reads the ## and ### sections of a markdown file (not those
// inside code blocks).
func sections(path string) ([]section, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []section
	var cur *section
	inCode, inWhere := false, false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		switch {
		case !inCode && (strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ")):
			out = append(out, section{title: strings.TrimLeft(line, "# "), line: n})
			cur, inWhere = &out[len(out)-1], false
		case cur == nil:
		case strings.HasPrefix(line, whereLead):
			cur.where, cur.whereLine, inWhere = line, n, true
		case inWhere && strings.TrimSpace(line) != "":
			cur.where += " " + line
		case strings.TrimSpace(line) == "":
			inWhere = false
		default:
			cur.hasText = true
		}
	}
	return out, sc.Err()
}

// codeSpan is one backquoted token.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// checkWhere returns what is wrong with one "Where in the code" line: a
// path that does not exist, a name not defined in the path before it, or
// a name before any path.
func checkWhere(where string, decls map[string]map[string]bool) []string {
	var problems []string
	file := ""
	for _, m := range codeSpan.FindAllStringSubmatch(where, -1) {
		tok := m[1]
		if isPath(tok) {
			file = tok
			if _, err := os.Stat(filepath.Join(root, file)); err != nil {
				problems = append(problems, fmt.Sprintf("names `%s`, which does not exist", file))
				file = "?"
			}
			continue
		}
		switch {
		case file == "":
			problems = append(problems, fmt.Sprintf("names `%s` before any file", tok))
		case file == "?":
		default:
			defined, err := definedIn(file, decls)
			if err != nil {
				problems = append(problems, fmt.Sprintf("`%s`: %v", file, err))
			} else if !defined[tok] && !defined["."+tok] {
				problems = append(problems, fmt.Sprintf("names `%s` in `%s`, which does not define it", tok, file))
			}
		}
	}
	return problems
}

// isPath tells a file or directory from a name: it has a slash or a file
// extension.
func isPath(tok string) bool {
	return strings.Contains(tok, "/") || fileExt.MatchString(tok)
}

// fileExt is compiled once, not for every token isPath looks at.
var fileExt = regexp.MustCompile(`\.(go|md|sh|py|json)$`)

// definedIn returns the top-level names of a Go file (functions, types,
// variables, constants; methods as Type.Method, or bare), or of every Go file of a
// directory; other files define nothing.
func definedIn(path string, cache map[string]map[string]bool) (map[string]bool, error) {
	if d, ok := cache[path]; ok {
		return d, nil
	}
	full := filepath.Join(root, path)
	files := []string{full}
	if fi, err := os.Stat(full); err == nil && fi.IsDir() {
		files, _ = filepath.Glob(filepath.Join(full, "*.go"))
	}
	d := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if !strings.HasSuffix(f, ".go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		addDecls(af, d)
	}
	cache[path] = d
	return d, nil
}

// addDecls adds a parsed file's top-level names to d.
func addDecls(af *ast.File, d map[string]bool) {
	for _, decl := range af.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil || len(decl.Recv.List) == 0 {
				d[decl.Name.Name] = true
				continue
			}
			d[recvType(decl.Recv.List[0].Type)+"."+decl.Name.Name] = true
			d["."+decl.Name.Name] = true // a method named without its type
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					d[spec.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						d[n.Name] = true
					}
				}
			}
		}
	}
}

// recvType is the type name of a method's receiver (*T, T[K] and T alike).
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// TestCheckWhereCatches: the checker reports a missing file and a name its
// file does not define, and passes what exists.
func TestCheckWhereCatches(t *testing.T) {
	decls := map[string]map[string]bool{}
	if p := checkWhere("Where in the code: `lock/lock.go` `File.Acquire`, `canRunLocked` is not a path; `Mode`.", decls); len(p) != 0 {
		t.Errorf("existing names reported: %v", p)
	}
	p := checkWhere("Where in the code: `lock/nolock.go` `X`; `lock/lock.go` `File.Nope`, `nope`; `lock/`.", decls)
	if len(p) != 3 {
		t.Fatalf("got %d problems, want 3 (missing file, missing method, missing func): %v", len(p), p)
	}
	for i, want := range []string{"lock/nolock.go", "File.Nope", "nope"} {
		if !strings.Contains(p[i], want) {
			t.Errorf("problem %d %q does not name %s", i, p[i], want)
		}
	}
}
