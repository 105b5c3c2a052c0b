// Package layers_test keeps the import graph one-way (DESIGN.md
// §Architecture): a package may import only packages of a lower layer, so
// `go list -deps` never shows a back edge.
package layers_test

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/dnnfs/dnnfs/"

// layer of every non-test package, bottom first. A new package must be
// placed here (the test fails until it is), which is the moment to decide
// what it may depend on.
var layer = map[string]int{
	"format":           0,
	"internal/units":   0,
	"internal/kv":      1,
	"embedding/wire":   1,
	"native/wire":      0, // the native path's control channel codec: standard library only
	"pmem":             1,
	"lock":             1,
	"alloc":            1,
	"cluster/objstore": 1, // everything in S3: the object store client and its codecs
	"journal":          2,
	"cluster/peer":     2, // the peer memory tier: chunk server, fetcher; namespace and objstore below it
	"client":           2, // linked into training jobs: wire and internal only
	"journal/seglog":   3,
	"recovery":         4,
	"core":             5,
	"embedding":        6,
	"cluster":          6, // the glue of DESIGN §Cluster: pool files as cluster files (core, peer, namespace, objstore)
	"fs":               7,
	"internal/metrics": 7, // reads core and embedding; wraps fs's raw file system without importing it
	"cmd/dnnfs":        8,

	"cluster/ids":       0, // the cluster's identities (node, cluster, file, version, chunk)
	"cluster/namespace": 1, // etcd (DESIGN §Cluster); of ours cluster/ids only

	"internal/pmemtest": 5, // test helper: a medium recovery.Check checks at cleanup
	"internal/pooltest": 6, // test helper: a formatted, opened pool (pmemtest + core)
}

// only lists packages that must stay lighter than their layer allows.
var only = map[string][]string{
	"client":         {"embedding/wire", "internal/kv", "internal/units"},
	"format":         {},
	"embedding/wire": {},
	"native/wire":    {},
	"pmem":           {},
	"lock":           {},

	"cluster/namespace": {"cluster/ids"},
	"cluster/ids":       {},
}

func TestImportsGoOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}:{{join .Imports \" \"}}", module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		pkg = strings.TrimPrefix(pkg, module)
		if strings.HasPrefix(pkg, "tests/") {
			continue // tests may use anything
		}
		l, ok := layer[pkg]
		if !ok {
			t.Errorf("package %s has no layer: add it to the table in this test (DESIGN.md §Architecture)", pkg)
			continue
		}
		seen++
		var deps []string
		for _, imp := range strings.Fields(imports) {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := strings.TrimPrefix(imp, module)
			deps = append(deps, dep)
			if dl, ok := layer[dep]; ok && dl >= l {
				t.Errorf("%s (layer %d) imports %s (layer %d): a back edge", pkg, l, dep, dl)
			}
		}
		if allowed, ok := only[pkg]; ok {
			for _, d := range deps {
				if !contains(allowed, d) {
					t.Errorf("%s may import only %v of this module, but imports %s", pkg, allowed, d)
				}
			}
		}
		sort.Strings(deps)
		t.Logf("%-15s layer %d imports %v", pkg, l, deps)
	}
	if seen < len(layer) {
		t.Errorf("go list showed %d of the %d packages in the table", seen, len(layer))
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
