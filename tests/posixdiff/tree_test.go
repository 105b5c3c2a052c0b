package posixdiff

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiffTrees checks the comparator itself on two plain directories: a
// differential test whose differ sees nothing would pass whatever dnnfs did.
func TestDiffTrees(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	write := func(dir, name, data string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(a, "same", "x", 0o644)
	write(b, "same", "x", 0o644)
	write(a, "mode", "x", 0o644)
	write(b, "mode", "x", 0o600)
	write(a, "size", "x", 0o644)
	write(b, "size", "xy", 0o644)
	write(a, "data", "x", 0o644)
	write(b, "data", "y", 0o644)
	write(a, "onlyA", "", 0o644)
	if err := os.Mkdir(filepath.Join(b, "onlyA"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := diffTrees(a, a, true); len(got) != 0 {
		t.Errorf("a tree differs from itself: %q", got)
	}
	got := strings.Join(diffTrees(a, b, true), "\n")
	for _, want := range []string{`"mode": mode A=0644 B=0600`, `"size": size A=1 B=2`, `"data": `, `"onlyA": type A=`} {
		if !strings.Contains(got, want) {
			t.Errorf("diffTrees misses %q; it said:\n%s", want, got)
		}
	}
	if strings.Contains(got, `"same"`) {
		t.Errorf("diffTrees reports an equal file:\n%s", got)
	}
	if strings.Contains(strings.Join(diffTrees(a, b, false), "\n"), `"data": `) {
		t.Errorf("contents compared without full")
	}
	for i := 0; i < maxReportedDiffs+5; i++ {
		write(a, "extra"+string(rune('a'+i)), "", 0o644)
	}
	if n := len(diffTrees(a, b, true)); n != maxReportedDiffs {
		t.Errorf("%d differences reported, want the cap %d", n, maxReportedDiffs)
	}
}
