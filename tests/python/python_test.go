// Package python_test installs the Python package (python/, with its
// pyproject.toml) into a venv the way a user does — Debian's /usr/bin/python3
// -m venv --system-site-packages (so Debian's python3-torch and python3-numpy
// are visible), then pip install ./python — and runs its checks with that
// venv's Python against real mounts: dnnfs.torch.save/load against
// torch.save/torch.load, a save resumed after its Python process and after
// the daemon were killed, the EmbeddingBag example, and the native path's
// wire codec (dnnfs._wire) against native/wire's frames.
package python_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// systemPython is Debian's interpreter, where apt-get install python3-torch
// python3-numpy python3-venv python3-setuptools python3-pip (make deps) put
// their modules.
const systemPython = "/usr/bin/python3"

var (
	venvOnce sync.Once
	venvDir  string // the venv; removed by TestMain
	venvErr  error
	scripts  string // copies of the test scripts, outside python/ so that
	// `import dnnfs` finds the installed package, not the source
)

func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv("GORACE"); !ok {
		os.Setenv("GORACE", "atexit_sleep_ms=0") // see tests/e2e
	}
	code := m.Run()
	if venvDir != "" {
		os.RemoveAll(filepath.Dir(venvDir))
	}
	harness.RemoveBuiltBinary()
	os.Exit(code)
}

// venv returns the venv's python, creating the venv and installing the
// package on first use. Missing prerequisites fail the test: make deps
// installs them.
func venv(t *testing.T) string {
	t.Helper()
	venvOnce.Do(func() { venvErr = makeVenv() })
	if venvErr != nil {
		t.Fatalf("%v", venvErr)
	}
	return filepath.Join(venvDir, "bin", "python")
}

func makeVenv() error {
	for _, mod := range []string{"torch", "numpy", "venv", "setuptools", "pip"} {
		if out, err := exec.Command(systemPython, "-c", "import "+mod).CombinedOutput(); err != nil {
			return fmt.Errorf("%s cannot import %s (%v: %s): run make deps (it installs python3-torch, python3-numpy, python3-venv, python3-setuptools, python3-pip)",
				systemPython, mod, err, bytes.TrimSpace(out))
		}
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		return err
	}
	base, err := os.MkdirTemp("", "dnnfs-python-")
	if err != nil {
		return err
	}
	venvDir = filepath.Join(base, "venv")
	scripts = filepath.Join(base, "scripts")
	// pip builds in its source directory (build/, *.egg-info): install
	// from a copy so the tree stays clean and the test sees only what a
	// checkout ships.
	src := filepath.Join(base, "src")
	steps := [][]string{
		{"cp", "-r", filepath.Join(root, "python"), src},
		{"rm", "-rf", filepath.Join(src, "build"), filepath.Join(src, "dnnfs.egg-info")},
		{systemPython, "-m", "venv", "--system-site-packages", venvDir},
		{filepath.Join(venvDir, "bin", "pip"), "install", "--no-build-isolation", "--no-index", "--no-cache-dir", src},
		{"mkdir", scripts},
		{"cp", filepath.Join(root, "python", "test_dnnfs_torch.py"), filepath.Join(root, "python", "example_embeddingbag.py"),
			filepath.Join(root, "python", "test_dnnfs_native_wire.py"), scripts},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// runPy runs a script of scripts/ with the venv's python, requiring that
// dnnfs is imported from the venv.
func runPy(t *testing.T, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	py := venv(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Dir = scripts
	cmd.Env = pyEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func pyEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHONPATH=") {
			env = append(env, kv)
		}
	}
	return append(env, "PYTHONDONTWRITEBYTECODE=1", "DNNFS_EXPECT_PREFIX="+venvDir)
}

func script(name string) string { return filepath.Join(scripts, name) }

// lastLine is the last non-empty line of s (a Python traceback's error).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestInstalledPackage: pip put dnnfs (with dnnfs.torch) into the venv, and
// the names the module always had are still there.
func TestInstalledPackage(t *testing.T) {
	t.Parallel()
	venv(t)
	out, err := runPy(t, time.Minute, "-c", `
import os, sys, dnnfs, dnnfs.torch
assert dnnfs.__file__.startswith(sys.prefix), dnnfs.__file__
missing = [n for n in dnnfs.__all__ if not hasattr(dnnfs, n)]
assert not missing, missing
for n in ("save", "load", "session", "abandon", "Table", "lookup", "create_table", "table_info"):
    assert callable(getattr(dnnfs, n)), n
assert callable(dnnfs.torch.save) and callable(dnnfs.torch.load)
print("OK", dnnfs.__file__)
`)
	if err != nil || !strings.Contains(out, "OK ") {
		t.Fatalf("import from the venv: %v\n%s", err, out)
	}
	t.Log(out)
}

// TestTorchSaveLoad: dnnfs.torch.save writes what torch.save writes, and
// both loads read both (python/test_dnnfs_torch.py check).
func TestTorchSaveLoad(t *testing.T) {
	t.Parallel()
	venv(t)
	fs := harness.Mount(t, harness.Mkfs(t, "256MiB"))
	out, err := runPy(t, 10*time.Minute, script("test_dnnfs_torch.py"), "check", fs.Mnt)
	t.Logf("test_dnnfs_torch.py check:\n%s", out)
	if err != nil || !strings.Contains(out, "OK errors name the path") {
		t.Fatalf("test_dnnfs_torch.py check: %v", err)
	}
}

// TestTorchSaveKilledPython: a save whose Python process is SIGKILLed
// mid-way resumes from the session's tails and loads equal.
func TestTorchSaveKilledPython(t *testing.T) {
	t.Parallel()
	venv(t)
	fs := harness.Mount(t, harness.Mkfs(t, "512MiB"))
	out, err := runPy(t, 10*time.Minute, script("test_dnnfs_torch.py"), "kill-python", fs.Mnt)
	t.Logf("test_dnnfs_torch.py kill-python:\n%s", out)
	if err != nil || !strings.Contains(out, "OK the resumed save loads equal") {
		t.Fatalf("test_dnnfs_torch.py kill-python: %v", err)
	}
}

type session struct {
	Mode     string `json:"mode"`
	Size     int64  `json:"size"`
	Segments []struct {
		Start int64 `json:"start"`
		Tail  int64 `json:"tail"`
	} `json:"segments"`
}

// durable is how much of path's open write session its tails cover; ok is
// false when there is no open write session, or when the file does not
// record what is saved (user.dnnfs-save.source, set before the session
// starts), without which a save would start over, not resume.
func durable(path string) (done, size int64, ok bool) {
	buf := make([]byte, 64<<10)
	if _, err := unix.Getxattr(path, "user.dnnfs-save.source", buf); err != nil {
		return 0, 0, false
	}
	n, err := unix.Getxattr(path, "user.dnnfs.session", buf)
	if err != nil {
		return 0, 0, false
	}
	var s session
	if json.Unmarshal(buf[:n], &s) != nil || s.Mode != "write" {
		return 0, 0, false
	}
	for _, g := range s.Segments {
		done += g.Tail - g.Start
	}
	return done, s.Size, true
}

// TestTorchSaveKilledDaemon: the daemon is SIGKILLed while dnnfs.torch.save
// writes; after a remount the same save resumes and the file loads equal.
func TestTorchSaveKilledDaemon(t *testing.T) {
	t.Parallel()
	py := venv(t)
	fs := harness.Mount(t, harness.Mkfs(t, "512MiB"))
	path := fs.Path("killed.pt")
	for attempt := 0; ; attempt++ {
		if attempt == 5 {
			t.Fatal("no attempt caught the save in progress")
		}
		os.Remove(path)
		cmd := exec.Command(py, script("test_dnnfs_torch.py"), "child-save", path)
		cmd.Dir = scripts
		cmd.Env = pyEnv()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		killed := false
	poll:
		for {
			select {
			case err := <-exited:
				t.Logf("attempt %d: the save ended before the daemon was killed (%v): %s", attempt, err, out.String())
				break poll
			default:
			}
			if done, size, ok := durable(path); ok && done > 0 && done < size {
				t.Logf("killing the daemon with %d of %d bytes durable", done, size)
				fs.Kill(t)
				killed = true
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if !killed {
			continue
		}
		err := <-exited
		t.Logf("the saving process after the daemon died: %v\n%s", err, out.String())
		if err == nil {
			t.Fatal("dnnfs.torch.save reported success although the daemon was killed mid-save")
		}
		if last := lastLine(out.String()); !strings.Contains(last, path) {
			t.Errorf("the save's error does not name the file %s: %q", path, last)
		}
		break
	}
	fs.Remount(t)
	if _, _, ok := durable(path); !ok {
		t.Fatal("no open write session after the remount: nothing to resume")
	}
	out, err := runPy(t, 10*time.Minute, script("test_dnnfs_torch.py"), "resume", path)
	t.Logf("test_dnnfs_torch.py resume:\n%s", out)
	if err != nil || !strings.Contains(out, "OK the resumed save loads equal") {
		t.Fatalf("test_dnnfs_torch.py resume: %v", err)
	}
}

// TestEmbeddingBagExample runs python/example_embeddingbag.py (numpy and
// torch.nn.EmbeddingBag against the SSD tier) with the installed package.
func TestEmbeddingBagExample(t *testing.T) {
	t.Parallel()
	venv(t)
	ssd := t.TempDir()
	fs := harness.Mount(t, harness.Mkfs(t, "64MiB"), "--ssd", ssd)
	out, err := runPy(t, 10*time.Minute, script("example_embeddingbag.py"), fs.Mnt)
	t.Logf("example_embeddingbag.py:\n%s", out)
	if err != nil || !strings.Contains(out, "all lookups OK") {
		t.Fatalf("example_embeddingbag.py: %v", err)
	}
	if strings.Contains(out, "reference skipped") {
		t.Fatal("the example did not run its torch.nn.EmbeddingBag part (python3-torch missing from the venv?)")
	}
}
