//go:build linux

package pmem

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"
)

func newPool(t testing.TB, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pool")
	if err := Create(path, size, false); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustOpen(t testing.TB, path string) Medium {
	t.Helper()
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestCreateOverwrite(t *testing.T) {
	path := newPool(t, MinSize)
	m := mustOpen(t, path)
	copy(m.Bytes()[100:], "old pool")
	m.Persist(100, 8)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	err := Create(path, 2*MinSize, false)
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("Create over existing pool: got %v, want ErrExists naming --force", err)
	}
	if err := Create(path, 2*MinSize, true); err != nil {
		t.Fatalf("Create with force: %v", err)
	}
	m = mustOpen(t, path)
	if m.Size() != 2*MinSize {
		t.Fatalf("size %d, want %d", m.Size(), 2*MinSize)
	}
	if !bytes.Equal(m.Bytes()[100:108], make([]byte, 8)) {
		t.Fatalf("old contents survived a forced Create: %q", m.Bytes()[100:108])
	}
}

func TestCreateBadSize(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int64{0, -4096, MinSize + 1} {
		if err := Create(filepath.Join(dir, "p"), size, true); err == nil {
			t.Errorf("Create(size %d) succeeded", size)
		}
	}
	if err := Create(filepath.Join(dir, "p"), 4096, true); !errors.Is(err, ErrTooSmall) {
		t.Errorf("Create(4096): got %v, want ErrTooSmall", err)
	}
}

func TestCreateSparse(t *testing.T) {
	path := newPool(t, 1<<30)
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 1<<30 {
		t.Fatalf("size %d, want 1 GiB", st.Size)
	}
	if used := st.Blocks * 512; used > 1<<20 {
		t.Fatalf("1 GiB pool uses %d bytes on disk; want a sparse file", used)
	}
}

func TestOpenPersistReopen(t *testing.T) {
	path := newPool(t, 4*MinSize)
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kind %v, flush instruction %s", m.Kind(), FlushInstruction())
	if m.Kind() != Emulated && m.Kind() != FSDAX {
		t.Fatalf("kind %v for a regular file", m.Kind())
	}
	const off = 3*MinSize + 12345
	copy(m.Bytes()[off:], "hello")
	m.Persist(off, 5)
	m.Persist(m.Size()-1, 100) // clamped, not a crash
	m.Persist(-10, 20)
	m.Persist(5, 0)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(ro.Bytes()[off : off+5]); got != "hello" {
		t.Fatalf("read-only reopen sees %q, want hello", got)
	}
	ro.Persist(off, 5) // no-op, must not fault
	ro.Close()

	m = mustOpen(t, path)
	if got := string(m.Bytes()[off : off+5]); got != "hello" {
		t.Fatalf("reopen sees %q, want hello", got)
	}
}

func TestOpenTooSmall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "small")
	if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrTooSmall) || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v, want ErrTooSmall naming the path", err)
	}
}

// A POSIX lock cannot stop this process from opening the pool twice, and a
// second open would lose the lock on close; Open must refuse it itself.
func TestOpenTwiceInProcess(t *testing.T) {
	path := newPool(t, MinSize)
	mustOpen(t, path)
	if _, err := Open(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Open: got %v, want ErrInUse", err)
	}
	if _, err := OpenReadOnly(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("OpenReadOnly while open: got %v, want ErrInUse", err)
	}
	if err := Create(path, MinSize, true); !errors.Is(err, ErrInUse) {
		t.Fatalf("forced Create while open: got %v, want ErrInUse", err)
	}
}

const holdEnv = "PMEM_TEST_HOLD_POOL"

// TestHelperHoldPool is not a test: TestOpenInUse runs the test binary again
// with holdEnv set, and this holds the pool until its stdin closes.
func TestHelperHoldPool(t *testing.T) {
	path, mode, _ := strings.Cut(os.Getenv(holdEnv), "|")
	if path == "" {
		t.Skip("helper process for TestOpenInUse")
	}
	open := Open
	if mode == "ro" {
		open = OpenReadOnly
	}
	m, err := open(path)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer m.Close()
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
}

// holdInChild opens path in another process and returns its pid and a
// function that makes it let go.
func holdInChild(t *testing.T, path, mode string) (pid int, release func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldPool$", "-test.count=1")
	cmd.Env = append(os.Environ(), holdEnv+"="+path+"|"+mode)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			stdin.Close()
			io.Copy(io.Discard, stdout)
			if err := cmd.Wait(); err != nil {
				t.Errorf("helper: %v", err)
			}
		})
	}
	t.Cleanup(release)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("helper did not open the pool: %q %v", line, err)
	}
	return cmd.Process.Pid, release
}

func TestOpenInUse(t *testing.T) {
	path := newPool(t, MinSize)

	pid, release := holdInChild(t, path, "rw")
	for name, open := range map[string]func(string) (Medium, error){"Open": Open, "OpenReadOnly": OpenReadOnly} {
		m, err := open(path)
		if err == nil {
			m.Close()
			t.Fatalf("%s succeeded while another process holds the pool", name)
		}
		if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d ", pid)) {
			t.Fatalf("%s: got %v, want ErrInUse naming pid %d", name, err, pid)
		}
	}
	if err := Create(path, MinSize, true); !errors.Is(err, ErrInUse) {
		t.Fatalf("forced Create of a held pool: got %v, want ErrInUse", err)
	}
	release()
	mustOpen(t, path).Close()

	// Readers share; a writer waits for them.
	pid, release = holdInChild(t, path, "ro")
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatalf("OpenReadOnly beside another reader: %v", err)
	}
	ro.Close()
	if _, err := Open(path); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d ", pid)) {
		t.Fatalf("Open beside a reader: got %v, want ErrInUse naming pid %d", err, pid)
	}
	release()
}

func TestRecorderImages(t *testing.T) {
	initial := bytes.Repeat([]byte{'.'}, 1024)
	r := NewRecorder(initial)
	initial[0] = 'X' // the recorder must have copied it
	b := r.Bytes()

	copy(b[0:], "A")
	r.Persist(0, 1) // fence 1
	copy(b[512:], "never flushed")
	copy(b[128:], "B")
	r.Flush(128, 1)
	r.Fence() // fence 2
	r.Fence() // fence 3, empty
	copy(b[0:], "D")
	r.Persist(0, 1) // fence 4, overwrites A
	copy(b[256:], "C")
	r.Flush(256, 1) // flushed, never fenced

	if r.Fences() != 4 {
		t.Fatalf("Fences() = %d, want 4", r.Fences())
	}
	at := func(img []byte, off int) byte { return img[off] }
	want := []struct{ b0, b128 byte }{{'.', '.'}, {'A', '.'}, {'A', 'B'}, {'A', 'B'}, {'D', 'B'}}
	for k, w := range want {
		img := r.Image(k)
		if at(img, 0) != w.b0 || at(img, 128) != w.b128 {
			t.Errorf("Image(%d): [0]=%c [128]=%c, want %c %c", k, img[0], img[128], w.b0, w.b128)
		}
		if at(img, 256) != '.' {
			t.Errorf("Image(%d) holds a flush that was never fenced", k)
		}
		if bytes.Contains(img, []byte("never")) {
			t.Errorf("Image(%d) holds a store that was never flushed", k)
		}
	}
	img := r.Image(r.Fences())
	img[0] = 'Z'
	if r.Image(r.Fences())[0] != 'D' {
		t.Fatal("Image shares memory with the recorder")
	}

	// A flush writes back whole cache lines, neighbours included.
	copy(b[CacheLine+5:], "n")
	copy(b[CacheLine+9:], "f")
	r.Persist(CacheLine+9, 1)
	if img := r.Image(r.Fences()); img[CacheLine+5] != 'n' {
		t.Fatal("a store sharing the flushed cache line is missing")
	}
}

func TestFaultyCrashAfterFences(t *testing.T) {
	r := NewRecorder(make([]byte, 4096))
	f := NewFaulty(r)
	calls := 0
	f.CrashAfterFences(3, func() { calls++; panic(ErrInjected) })

	var crashedAt int
	func() {
		defer func() {
			if v := recover(); v != ErrInjected {
				panic(v)
			}
		}()
		for i := range 10 {
			crashedAt = i
			f.Bytes()[i*CacheLine] = byte('a' + i)
			if i%2 == 0 {
				f.Persist(int64(i*CacheLine), 1)
			} else {
				f.Flush(int64(i*CacheLine), 1)
				f.Fence()
			}
		}
	}()
	if calls != 1 || crashedAt != 2 || f.Fences() != 3 || r.Fences() != 3 {
		t.Fatalf("calls %d, crashed in step %d, fences %d/%d; want 1, 2, 3/3", calls, crashedAt, f.Fences(), r.Fences())
	}
	if img := r.Image(3); img[2*CacheLine] != 'c' {
		t.Fatal("the fence before the crash is not in the image")
	}
	f.Fence()
	if calls != 1 {
		t.Fatal("crash callback ran twice")
	}
}

func TestMemory(t *testing.T) {
	m := NewMemory(8192)
	if m.Size() != 8192 || len(m.Bytes()) != 8192 || m.Kind() != Memory {
		t.Fatal("bad memory medium")
	}
	m.Persist(0, 100)
	for i := 0; i < 2; i++ { // a second Close is harmless
		if err := m.Close(); err != nil {
			t.Fatalf("Close %d: %v", i+1, err)
		}
	}
}

func TestClampRange(t *testing.T) {
	const max64 = 1<<63 - 1
	for _, c := range []struct {
		off, n, size, start, end int64
		ok                       bool
	}{
		{0, 10, 100, 0, 10, true},
		{90, 20, 100, 90, 100, true},
		{-5, 10, 100, 0, 5, true},
		{-5, 5, 100, 0, 0, false},
		{100, 1, 100, 0, 0, false},
		{10, 0, 100, 0, 0, false},
		{10, -1, 100, 0, 0, false},
		{10, max64, 100, 10, 100, true},
		{-max64, max64, 100, 0, 0, false},
	} {
		s, e, ok := clampRange(c.off, c.n, c.size)
		if ok != c.ok || ok && (s != c.start || e != c.end) {
			t.Errorf("clampRange(%d, %d, %d) = %d, %d, %v", c.off, c.n, c.size, s, e, ok)
		}
	}
}

// The flush instructions work on any memory, so they run here even
// without DAX.
func TestFlushCPU(t *testing.T) {
	buf := make([]byte, 3*4096+17)
	for _, r := range [][2]int{{0, len(buf)}, {1, 1}, {63, 2}, {100, 0}, {4095, 4097}, {len(buf) - 1, 1}} {
		buf[r[0]] = 7
		flushCPU(unsafe.Pointer(&buf[r[0]]), uintptr(r[1]))
		sfence()
	}
}

func TestConcurrentFlush(t *testing.T) {
	const workers, region = 8, 128 << 10
	media := map[string]Medium{
		"memory":   NewMemory(workers * region),
		"recorder": NewRecorder(make([]byte, workers*region)),
		"file":     mustOpen(t, newPool(t, workers*region)),
	}
	for name, m := range media {
		t.Run(name, func(t *testing.T) {
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					base := int64(w * region)
					b := m.Bytes()[base : base+region]
					for i := range 64 {
						off := int64(i * 1000 % (region - 10))
						b[off] = byte(w)
						m.Persist(base+off, 10)
					}
					m.Flush(base, region)
					m.Fence()
				})
			}
			wg.Wait()
			if r, ok := m.(*Recorder); ok && r.Fences() != workers*65 {
				t.Fatalf("recorder counted %d fences, want %d", r.Fences(), workers*65)
			}
			if e, ok := m.(interface{ Err() error }); ok && e.Err() != nil {
				t.Fatal(e.Err())
			}
		})
	}
}

func BenchmarkPersist(b *testing.B) {
	m := mustOpen(b, newPool(b, 4<<20))
	for _, sz := range []struct {
		name string
		n    int64
	}{{"64B", 64}, {"4KiB", 4 << 10}, {"1MiB", 1 << 20}} {
		b.Run(m.Kind().String()+"/"+sz.name, func(b *testing.B) {
			buf := m.Bytes()
			b.SetBytes(sz.n)
			for i := 0; b.Loop(); i++ {
				off := int64(i%2) * (2 << 20) // alternate, so each Persist has dirty data
				for p := off; p < off+sz.n; p += 4096 {
					buf[p] = byte(i)
				}
				m.Persist(off, sz.n)
			}
		})
	}
}

func BenchmarkFlushCPU(b *testing.B) {
	buf := make([]byte, 1<<20)
	for _, sz := range []struct {
		name string
		n    int
	}{{"64B", 64}, {"4KiB", 4 << 10}, {"1MiB", 1 << 20}} {
		b.Run(FlushInstruction()+"/"+sz.name, func(b *testing.B) {
			b.SetBytes(int64(sz.n))
			for i := 0; b.Loop(); i++ {
				for p := 0; p < sz.n; p += CacheLine {
					buf[p] = byte(i)
				}
				flushCPU(unsafe.Pointer(&buf[0]), uintptr(sz.n))
				sfence()
			}
		})
	}
}
