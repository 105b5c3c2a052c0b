package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
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

// inTerminal runs dnnfs with args under script(1), whose pseudo-terminal
// is stdin, stdout and stderr (80x24: a pty starts as 0x0, where a bar
// has no room), and returns what the terminal showed.
func inTerminal(t *testing.T, args ...string) string {
	t.Helper()
	cmdline := "stty cols 80 rows 24; exec " + shellQuote(harness.Binary(t))
	for _, a := range args {
		cmdline += " " + shellQuote(a)
	}
	out, err := exec.Command("script", "-q", "-e", "-c", cmdline, "/dev/null").CombinedOutput()
	if err != nil {
		t.Fatalf("script -c %q: %v\n%s", cmdline, err, out)
	}
	return string(out)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestCLIProgress: cp, fsck and recover draw a progress bar on a terminal
// (through a pseudo-terminal) and print nothing more than their result
// when stderr is not one.
func TestCLIProgress(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")
	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, src, randBytes(9, 6<<20), 0o644)
	// A bar: NAME, counters, [===...], percentage (mpb's BarStyle).
	barOf := func(name, counts string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + name + `\s+` + counts + `\s+\[=+\]\s+100 %`)
	}
	out := inTerminal(t, "cp", src, fs.Path("a"))
	if !barOf("cp", `6\.0 MiB / 6\.0 MiB`).MatchString(out) || !strings.Contains(out, "copied 6291456 bytes") {
		t.Errorf("dnnfs cp on a terminal shows no full bar:\n%s", out)
	}
	stdout, stderr, code := harness.Run(t, "cp", src, fs.Path("b"))
	if code != 0 || stderr != "" || strings.Count(stdout, "\n") != 1 {
		t.Errorf("dnnfs cp without a terminal: exit %d, stderr %q, stdout %q; want one line on stdout", code, stderr, stdout)
	}
	wantBytes(t, "file copied on a terminal", readFile(t, fs.Path("a")), readFile(t, src))
	fs.Unmount(t)

	for _, args := range [][]string{{"fsck", "--pool", fs.Pool}, {"recover", "--pool", fs.Pool}} {
		out := inTerminal(t, args...)
		if !barOf(args[0], `(\d+)/(\d+)`).MatchString(out) {
			t.Errorf("dnnfs %s on a terminal shows no full bar:\n%s", strings.Join(args, " "), out)
		}
		stdout, stderr, code := harness.Run(t, args...)
		if code != 0 || stderr != "" || strings.Contains(stdout, "[=") || strings.Contains(stdout, "\x1b") {
			t.Errorf("dnnfs %s without a terminal: exit %d, stderr %q, stdout %q", strings.Join(args, " "), code, stderr, stdout)
		}
	}
}
