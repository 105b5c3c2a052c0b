package e2e_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// TestCLIStatusPaths: `dnnfs status` names the files with lock activity by
// their paths on the mount (the daemon's status JSON carries the inode
// numbers and the paths), and a file deleted while open as deleted.
func TestCLIStatusPaths(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "16MiB")
	must(t, os.MkdirAll(fs.Path("ckpt", "epoch 1"), 0o755))
	writeFile(t, fs.Path("ckpt", "epoch 1", "w.bin"), randBytes(1, 8192), 0o644)
	writeFile(t, fs.Path("top"), randBytes(2, 100), 0o644)
	f, err := os.OpenFile(fs.Path("ckpt", "gone"), os.O_CREATE|os.O_RDWR, 0o644)
	must(t, err)
	defer f.Close()
	_, err = f.Write(randBytes(3, 4096))
	must(t, err)
	must(t, os.Remove(fs.Path("ckpt", "gone")))

	out, stderr, code := harness.Run(t, "status", fs.Mnt)
	if code != 0 || stderr != "" {
		t.Fatalf("dnnfs status: exit %d, %s", code, stderr)
	}
	var files []string
	inTable := false
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "FILE ") {
			inTable = true
			continue
		}
		if inTable {
			if strings.TrimSpace(line) == "" {
				break
			}
			name, _, _ := strings.Cut(line, "  ")
			files = append(files, name)
		}
	}
	want := []string{fs.Path("ckpt", "epoch 1", "w.bin"), fs.Path("top")}
	for _, w := range want {
		if !strings.Contains(strings.Join(files, "\n"), w) {
			t.Errorf("dnnfs status does not name %s; files %q\n%s", w, files, out)
		}
	}
	deleted := regexp.MustCompile(`^\(deleted, ino \d+\)`)
	n := 0
	for _, name := range files {
		if deleted.MatchString(name) {
			n++
		} else if !strings.HasPrefix(name, fs.Mnt+"/") {
			t.Errorf("dnnfs status names a file %q, not a path on %s", name, fs.Mnt)
		}
	}
	if n != 1 {
		t.Errorf("dnnfs status shows %d deleted files, want 1 (the open, unlinked one):\n%s", n, out)
	}
	t.Logf("dnnfs status:\n%s", out)
}
