package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/client"
	"github.com/dnnfs/dnnfs/tests/harness"
)

// python is the interpreter the Python tests use: Debian's, where
// apt-get install python3-numpy (and python3-torch) put their modules.
const python = "/usr/bin/python3"

func pythonDir(t *testing.T) string {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "python")
}

func runPython(t *testing.T, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pythonDir(t), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPythonExample runs python/example_checkpoint.py against a mount: a
// NumPy checkpoint (and a PyTorch one if python3-torch is installed) saved
// and loaded through the dnnfs package (python/dnnfs) must come back equal.
func TestPythonExample(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not found: install python3 and python3-numpy (apt-get install python3-numpy)", python)
	}
	if out, err := exec.Command(python, "-c", "import numpy").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import numpy (%v: %s): apt-get install python3-numpy (and python3-torch for the PyTorch part)",
			python, err, bytes.TrimSpace(out))
	}
	fs := harness.Mount(t, harness.Mkfs(t, "256MiB"))
	out, err := runPython(t, 5*time.Minute, filepath.Join(pythonDir(t), "example_checkpoint.py"), fs.Mnt)
	t.Logf("example_checkpoint.py output:\n%s", out)
	if err != nil {
		t.Fatalf("example_checkpoint.py: %v", err)
	}
	for _, want := range []string{"numpy savez checkpoint:", "numpy raw array:", "torch checkpoint", "all checkpoints equal"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "MISMATCH") {
		t.Error("a checkpoint came back different")
	}
	if _, err := exec.Command(python, "-c", "import torch").CombinedOutput(); err == nil &&
		!strings.Contains(out, "torch checkpoint (torch") {
		t.Error("PyTorch is installed but the torch checkpoint did not run")
	}
	for _, name := range []string{"numpy_state.npz", "embedding.f32", "torch_state.pt"} {
		p := fs.Path("example-ckpt", name)
		if _, err := os.Stat(p); err != nil {
			continue // torch_state.pt without PyTorch
		}
		noSession(t, p)
	}
}

// TestPythonResume: a save interrupted by a daemon crash is resumed by
// dnnfs.save, which writes only what the persisted tails say is missing.
func TestPythonResume(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not found", python)
	}
	fs := harness.Mount(t, harness.Mkfs(t, "128MiB"))
	data := testData(8, 16*mib+12345)
	size := int64(len(data))
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	path := fs.Path("p.bin")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fsetxattr(int(f.Fd()), client.XattrSession, []byte("threads=4,size="+strconv.FormatInt(size, 10)), 0); err != nil {
		t.Fatal(err)
	}
	s, err := client.GetSession(path)
	if err != nil || s == nil {
		t.Fatalf("session: %+v, %v", s, err)
	}
	// Segments 0 and 2 whole, 1 for 2 MiB.
	for i, n := range []int64{s.Segments[0].Length, 2 * mib, s.Segments[2].Length} {
		g := s.Segments[i]
		for off := g.Start; off < g.Start+n; off += mib {
			end := min(off+mib, g.Start+n)
			if _, err := f.WriteAt(data[off:end], off); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.Sync()
	f.Close()
	fs.Kill(t)
	fs.Remount(t)
	s, err = client.GetSession(path)
	if err != nil || s == nil {
		t.Fatalf("session after the crash: %+v, %v", s, err)
	}
	done := progress(s)

	script := `import dnnfs, json, sys
data = open(sys.argv[1], "rb").read()
print(json.dumps({"session": dnnfs.session(sys.argv[2]) is not None, "save": dnnfs.save(sys.argv[2], data, threads=4)}))
st = {}
back = dnnfs.load(sys.argv[2], threads=3, stats=st)
print(json.dumps({"equal": back == data, "load": st, "after": dnnfs.session(sys.argv[2])}))
`
	out, err := runPython(t, 2*time.Minute, "-c", script, src, path)
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	t.Logf("python:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want two JSON lines, got:\n%s", out)
	}
	var r1 struct {
		Session bool
		Save    struct {
			Size, Bytes, Skipped int64
			Resumed              bool
		}
	}
	var r2 struct {
		Equal bool
		Load  struct{ Bytes, Skipped int64 }
		After any
	}
	if err := json.Unmarshal([]byte(lines[0]), &r1); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &r2); err != nil {
		t.Fatal(err)
	}
	if !r1.Session || !r1.Save.Resumed || r1.Save.Skipped != done || r1.Save.Bytes != size-done {
		t.Errorf("python save %+v: want resumed, %d skipped, %d written", r1, done, size-done)
	}
	if !r2.Equal || r2.Load.Bytes != size || r2.Load.Skipped != 0 || r2.After != nil {
		t.Errorf("python load %+v: want all %d bytes, equal, session closed", r2, size)
	}
	noSession(t, path)
	sameFile(t, path, data)
}

// TestPythonLoadResume: a dnnfs.load into a buffer, interrupted by a
// daemon crash, resumes into the same buffer after the remount and reads
// only the unread parts; a load into a fresh buffer reads everything.
func TestPythonLoadResume(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not found", python)
	}
	fs := harness.Mount(t, harness.Mkfs(t, "128MiB"), "--tail-interval", "1MiB")
	data := testData(9, 24*mib+4321)
	path := fs.Path("l.bin")
	if _, err := client.Save(path, bytes.NewReader(data), int64(len(data)), 4); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Each chunk read is slowed down so that the crash lands mid-load.
	script := `import dnnfs, json, sys, time
real = dnnfs._read_all
def slow(*a):
    time.sleep(0.05)
    return real(*a)
dnnfs._read_all = slow
path, want = sys.argv[1], open(sys.argv[2], "rb").read()
out = bytearray(len(want))
try:
    dnnfs.load(path, threads=4, out=out)
    print("not interrupted", flush=True)
except dnnfs.SegmentError as e:
    print("interrupted:", e, flush=True)
sys.stdin.readline()
dnnfs._read_all = real
st = {}
dnnfs.load(path, threads=4, out=out, stats=st)
fresh = {}
back = dnnfs.load(path, threads=4, stats=fresh)
print(json.dumps({"resumed": st, "equal": out == want, "fresh": fresh, "fresh_equal": back == want}), flush=True)
`
	cmd := exec.Command(python, "-c", script, path, src)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pythonDir(t), "PYTHONDONTWRITEBYTECODE=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(syncBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		s, err := client.GetSession(path)
		if err == nil && s != nil && progress(s) >= 4*mib {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load made no progress: %+v, %v\n%s", s, err, stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	fs.Kill(t)
	var line string
	select {
	case line = <-lines:
	case <-time.After(time.Minute):
		t.Fatalf("python did not report the interruption\n%s", stderr.String())
	}
	if !strings.HasPrefix(line, "interrupted:") {
		t.Fatalf("python: %q, want the load interrupted\n%s", line, stderr.String())
	}
	fs.Remount(t)
	s, err := client.GetSession(path)
	if err != nil || s == nil {
		t.Fatalf("read session after the crash: %+v, %v", s, err)
	}
	done := progress(s)
	io.WriteString(stdin, "go\n")
	select {
	case line = <-lines:
	case <-time.After(time.Minute):
		t.Fatalf("python did not finish\n%s", stderr.String())
	}
	t.Logf("python: %s (persisted read progress %d)", line, done)
	var r struct {
		Resumed struct {
			Bytes, Skipped int64
			Resumed        bool
		}
		Equal bool
		Fresh struct {
			Bytes, Skipped int64
			Resumed        bool
		}
		FreshEqual bool `json:"fresh_equal"`
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("%v: %q\n%s", err, line, stderr.String())
	}
	size := int64(len(data))
	if !r.Resumed.Resumed || r.Resumed.Skipped != done || r.Resumed.Bytes+r.Resumed.Skipped != size || !r.Equal {
		t.Errorf("resumed load %+v (equal %v): want resumed with %d skipped and the data equal", r.Resumed, r.Equal, done)
	}
	if r.Fresh.Resumed || r.Fresh.Skipped != 0 || r.Fresh.Bytes != size || !r.FreshEqual {
		t.Errorf("fresh load %+v (equal %v): want a full load", r.Fresh, r.FreshEqual)
	}
	stdin.Close()
	noSession(t, path)
}

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
