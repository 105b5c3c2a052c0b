package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/client"
	"github.com/dnnfs/dnnfs/tests/harness"
)

const mib = 1 << 20

func TestMain(m *testing.M) {
	if os.Getenv("DNNFS_CLIENT_HELPER") == "save" {
		helperSave()
		return
	}
	code := m.Run()
	harness.RemoveBuiltBinary()
	os.Exit(code)
}

// testData returns n deterministic pseudo-random bytes.
func testData(seed uint64, n int) []byte {
	var key [32]byte
	key[0] = byte(seed)
	key[1] = byte(seed >> 8)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// memBuf is a load destination.
type memBuf struct{ b []byte }

func (m *memBuf) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		return 0, fmt.Errorf("memBuf: write [%d, %d) outside %d bytes", off, off+int64(len(p)), len(m.b))
	}
	return copy(m.b[off:], p), nil
}

// gate passes calls until limit bytes went through, then reports on
// reached once and blocks every call until release is closed, after which
// calls return err.
type gate struct {
	limit   int64
	err     error // what calls return once released
	n       atomic.Int64
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func newGate(limit int64) *gate {
	return &gate{limit: limit, err: errGate, reached: make(chan struct{}), release: make(chan struct{})}
}

var errGate = errors.New("gate closed")

func (g *gate) pass(n int) error {
	if g.n.Add(int64(n)) > g.limit {
		g.once.Do(func() { close(g.reached) })
		<-g.release
		return g.err
	}
	return nil
}

type gatedReader struct {
	r *bytes.Reader
	g *gate
}

func (r gatedReader) ReadAt(p []byte, off int64) (int, error) {
	if err := r.g.pass(len(p)); err != nil {
		return 0, err
	}
	return r.r.ReadAt(p, off)
}

type gatedWriter struct {
	w *memBuf
	g *gate
}

func (w *gatedWriter) WriteAt(p []byte, off int64) (int, error) {
	if err := w.g.pass(len(p)); err != nil {
		return 0, err
	}
	return w.w.WriteAt(p, off)
}

func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, want %d", path, len(got), len(want))
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("%s: differs from the source at offset %d", path, i)
	}
}

func firstDiff(a, b []byte) int {
	for off := 0; off < len(a); off += mib {
		end := min(off+mib, len(a))
		if !bytes.Equal(a[off:end], b[off:end]) {
			for i := off; i < end; i++ {
				if a[i] != b[i] {
					return i
				}
			}
		}
	}
	return -1
}

func noSession(t *testing.T, path string) {
	t.Helper()
	s, err := client.GetSession(path)
	if err != nil {
		t.Fatal(err)
	}
	if s != nil {
		t.Fatalf("%s: session still open: %+v", path, s)
	}
}

func progress(s *client.Session) int64 {
	var n int64
	for _, g := range s.Segments {
		n += g.Tail - g.Start
	}
	return n
}

func TestSaveLoad(t *testing.T) {
	t.Parallel()
	fs := harness.Mount(t, harness.Mkfs(t, "256MiB"))
	data := testData(1, 64*mib)
	path := fs.Path("w.bin")

	st, err := client.Save(path, bytes.NewReader(data), int64(len(data)), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("save: %+v", st)
	if st.Bytes != int64(len(data)) || st.Skipped != 0 || st.Resumed || st.Threads != 4 || !st.Tracked {
		t.Errorf("save stats %+v: want %d bytes written by 4 threads, nothing skipped, not resumed", st, len(data))
	}
	noSession(t, path)
	sameFile(t, path, data)

	dst := &memBuf{b: make([]byte, len(data))}
	st, err = client.Load(path, dst, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("load: %+v", st)
	if st.Bytes != int64(len(data)) || st.Skipped != 0 || st.Resumed || !st.Tracked {
		t.Errorf("load stats %+v: want %d bytes read, nothing skipped", st, len(data))
	}
	if i := firstDiff(dst.b, data); i >= 0 {
		t.Fatalf("loaded data differs at offset %d", i)
	}
	noSession(t, path)

	// Saving over a larger file shrinks it; odd sizes, tiny files, more
	// threads than blocks.
	for _, tc := range []struct {
		size, threads, wantThreads int
	}{{5*mib + 123, 3, 3}, {3 * 4096, 8, 3}, {100, 4, 1}, {0, 4, 1}, {4096, 0, 1}} {
		d := testData(uint64(tc.size), tc.size)
		st, err := client.Save(path, bytes.NewReader(d), int64(len(d)), tc.threads)
		if err != nil {
			t.Fatalf("size %d: %v", tc.size, err)
		}
		if st.Bytes != int64(tc.size) || st.Threads != tc.wantThreads {
			t.Errorf("size %d threads %d: stats %+v, want %d threads", tc.size, tc.threads, st, tc.wantThreads)
		}
		sameFile(t, path, d)
		dst := &memBuf{b: make([]byte, tc.size)}
		if _, err := client.Load(path, dst, tc.threads); err != nil {
			t.Fatalf("load size %d: %v", tc.size, err)
		}
		if !bytes.Equal(dst.b, d) {
			t.Fatalf("load size %d: data differs", tc.size)
		}
		noSession(t, path)
	}

	// Errors name the file; a file elsewhere is refused before anything
	// is written to it.
	other := t.TempDir() + "/x"
	if _, err := client.Save(other, bytes.NewReader(data[:8192]), 8192, 2); !errors.Is(err, client.ErrNotDnnfs) {
		t.Errorf("save outside dnnfs: err %v, want ErrNotDnnfs", err)
	}
	if _, err := client.Save(path, bytes.NewReader(data[:4096]), 8192, 2); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("save from a short source: err %v, want io.ErrUnexpectedEOF", err)
	} else {
		var se *client.SegmentError
		if !errors.As(err, &se) || se.Segment != 1 || se.Op != "read source" {
			t.Errorf("short source: %v: want a SegmentError of segment 1 reading the source", err)
		}
	}
}

// TestResumeAfterDaemonCrash: a job starts a session and writes part of
// its segments, the daemon is killed, the pool remounted; Save writes only
// what the persisted tails say is missing.
func TestResumeAfterDaemonCrash(t *testing.T) {
	t.Parallel()
	fs := harness.Mount(t, harness.Mkfs(t, "256MiB"))
	data := testData(2, 64*mib)
	size := int64(len(data))
	path := fs.Path("w.bin")

	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fsetxattr(int(f.Fd()), client.XattrSession, []byte("threads=4,size="+strconv.FormatInt(size, 10)), 0); err != nil {
		t.Fatal(err)
	}
	s0, err := client.GetSession(path)
	if err != nil || s0 == nil || len(s0.Segments) != 4 {
		t.Fatalf("session after start: %+v, %v", s0, err)
	}
	// Segment 0 whole, 1 for 9 MiB + 1000 bytes, 2 not at all, 3 for 5 MiB.
	written := []int64{s0.Segments[0].Length, 9*mib + 1000, 0, 5 * mib}
	for i, n := range written {
		g := s0.Segments[i]
		for off := g.Start; off < g.Start+n; off += mib {
			end := min(off+mib, g.Start+n)
			if _, err := f.WriteAt(data[off:end], off); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	before, err := client.GetSession(path)
	if err != nil || before == nil {
		t.Fatalf("session before the crash: %+v, %v", before, err)
	}
	f.Close()
	fs.Kill(t)
	fs.Remount(t)

	after, err := client.GetSession(path)
	if err != nil || after == nil {
		t.Fatalf("no session after the crash: %+v, %v", after, err)
	}
	for i, g := range after.Segments {
		b := before.Segments[i]
		if g.Tail != b.Tail || g.Done != b.Done {
			t.Errorf("segment %d: tail %d done %v after the crash, %d %v before", i, g.Tail, g.Done, b.Tail, b.Done)
		}
		if g.Tail < g.Start || g.Tail > g.Start+written[i] {
			t.Errorf("segment %d: tail %d outside [start %d, written end %d]", i, g.Tail, g.Start, g.Start+written[i])
		}
	}
	if !after.Segments[0].Done {
		t.Errorf("segment 0 was written whole but is not done: %+v", after.Segments[0])
	}
	done := progress(after)
	// With the default 4 MiB tail interval: 16 MiB + 8 MiB + 0 + 4 MiB.
	if done < 28*mib {
		t.Errorf("persisted progress %d bytes, want at least %d", done, 28*mib)
	}
	t.Logf("persisted tails after the crash: %+v (progress %d bytes)", after.Segments, done)

	st, err := client.Save(path, bytes.NewReader(data), size, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed save: %+v", st)
	if !st.Resumed || st.Skipped != done || st.Bytes != size-done {
		t.Errorf("resumed save stats %+v: want resumed, %d skipped, %d written", st, done, size-done)
	}
	noSession(t, path)
	sameFile(t, path, data)
}

// TestResumeInterruptedSave: a Save in progress when the daemon dies fails
// naming the segment; called again after the remount it writes only the
// rest.
func TestResumeInterruptedSave(t *testing.T) {
	t.Parallel()
	fs := harness.Mount(t, harness.Mkfs(t, "256MiB"))
	data := testData(3, 64*mib)
	size := int64(len(data))
	path := fs.Path("w.bin")

	g := newGate(40 * mib)
	errc := make(chan error, 1)
	go func() {
		_, err := client.Save(path, gatedReader{bytes.NewReader(data), g}, size, 4)
		errc <- err
	}()
	select {
	case <-g.reached:
	case err := <-errc:
		t.Fatalf("save ended before the gate: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("save made no progress")
	}
	before, err := client.GetSession(path)
	if err != nil || before == nil {
		t.Fatalf("no session during the save: %+v, %v", before, err)
	}
	fs.Kill(t)
	close(g.release)
	err = <-errc
	var se *client.SegmentError
	if err == nil || !errors.As(err, &se) {
		t.Fatalf("interrupted save: err %v, want a SegmentError", err)
	}
	t.Logf("interrupted save: %v", err)
	fs.Remount(t)
	after, err := client.GetSession(path)
	if err != nil || after == nil {
		t.Fatalf("no session after the crash: %+v, %v", after, err)
	}
	done := progress(after)
	if done < progress(before) || done == 0 {
		t.Errorf("progress %d after the crash, %d seen before it", done, progress(before))
	}
	st, err := client.Save(path, bytes.NewReader(data), size, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed: %+v", st)
	if !st.Resumed || st.Skipped != done || st.Bytes+st.Skipped != size {
		t.Errorf("resumed save stats %+v: want resumed with %d skipped", st, done)
	}
	noSession(t, path)
	sameFile(t, path, data)
}

// helperSave runs in a child process: it saves the test data and blocks
// after 40 MiB until it is killed.
func helperSave() {
	path := os.Getenv("DNNFS_CLIENT_PATH")
	data := testData(4, 64*mib)
	g := newGate(40 * mib)
	_, err := client.Save(path, gatedReader{bytes.NewReader(data), g}, int64(len(data)), 4)
	fmt.Fprintln(os.Stderr, "helper save returned:", err)
	os.Exit(3)
}

// TestResumeAfterJobCrash: the saving process is killed; another process
// resumes the save.
func TestResumeAfterJobCrash(t *testing.T) {
	t.Parallel()
	fs := harness.Mount(t, harness.Mkfs(t, "256MiB"))
	data := testData(4, 64*mib)
	size := int64(len(data))
	path := fs.Path("w.bin")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DNNFS_CLIENT_HELPER=save", "DNNFS_CLIENT_PATH="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s, err := client.GetSession(path)
		if err == nil && s != nil && progress(s) >= 24*mib {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the helper made no progress: session %+v, %v; stderr:\n%s", s, err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let it reach the gate
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	s, err := client.GetSession(path)
	if err != nil || s == nil {
		t.Fatalf("no session after the job died: %+v, %v", s, err)
	}
	done := progress(s)
	st, err := client.Save(path, bytes.NewReader(data), size, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("progress left by the dead job %d, resumed: %+v", done, st)
	if !st.Resumed || st.Skipped != done || st.Bytes+st.Skipped != size {
		t.Errorf("resumed save stats %+v: want resumed with %d skipped", st, done)
	}
	noSession(t, path)
	sameFile(t, path, data)
	fs.Unmount(t)
}

// TestResumeLoad: a Load interrupted by a daemon crash resumes into the
// same buffer; a Load into another buffer starts over.
func TestResumeLoad(t *testing.T) {
	t.Parallel()
	fs := harness.Mount(t, harness.Mkfs(t, "256MiB"))
	data := testData(5, 48*mib)
	size := int64(len(data))
	path := fs.Path("w.bin")
	if _, err := client.Save(path, bytes.NewReader(data), size, 4); err != nil {
		t.Fatal(err)
	}
	buf := &memBuf{b: make([]byte, size)}
	// A slow consumer: the copy into the buffer stalls (and then goes
	// through) while the daemon dies; the next read fails.
	g := newGate(30 * mib)
	g.err = nil
	dst := &gatedWriter{w: buf, g: g}
	errc := make(chan error, 1)
	go func() {
		_, err := client.Load(path, dst, 4)
		errc <- err
	}()
	select {
	case <-g.reached:
	case err := <-errc:
		t.Fatalf("load ended before the gate: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("load made no progress")
	}
	time.Sleep(100 * time.Millisecond) // read progress is recorded after the reply
	fs.Kill(t)
	close(g.release)
	if err := <-errc; err == nil {
		t.Fatal("load through a dead mount succeeded")
	}
	fs.Remount(t)
	s, err := client.GetSession(path)
	if err != nil || s == nil || s.Mode != "read" {
		t.Fatalf("read session after the crash: %+v, %v", s, err)
	}
	done := progress(s)
	if done == 0 {
		t.Errorf("no read progress persisted: %+v", s)
	}
	dst.g = newGate(1 << 62)
	st, err := client.Load(path, dst, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed load: %+v (persisted progress %d)", st, done)
	if !st.Resumed || st.Skipped != done || st.Bytes+st.Skipped != size {
		t.Errorf("resumed load stats %+v: want resumed with %d skipped", st, done)
	}
	if i := firstDiff(buf.b, data); i >= 0 {
		t.Fatalf("resumed load differs at offset %d", i)
	}
	noSession(t, path)

	// A stale read session (of another process, or another buffer) is
	// not resumed into a fresh buffer.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fsetxattr(int(f.Fd()), client.XattrSession, []byte("threads=4,mode=read,size="+strconv.FormatInt(size, 10)), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 6*mib), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fresh := &memBuf{b: make([]byte, size)}
	st, err = client.Load(path, fresh, 4)
	if err != nil {
		t.Fatal(err)
	}
	if st.Resumed || st.Skipped != 0 || st.Bytes != size {
		t.Errorf("load into a fresh buffer over a stale session: %+v, want a full load", st)
	}
	if !bytes.Equal(fresh.b, data) {
		t.Fatal("fresh load differs")
	}
	noSession(t, path)
}

// TestConflicts: sessions that cannot be resumed are reported, not mixed.
func TestConflicts(t *testing.T) {
	t.Parallel()
	fs := harness.Mount(t, harness.Mkfs(t, "128MiB"), "--tail-interval", "256KiB")
	data := testData(6, 16*mib)
	size := int64(len(data))
	path := fs.Path("w.bin")

	g := newGate(6 * mib)
	close(g.release)
	if _, err := client.Save(path, gatedReader{bytes.NewReader(data), g}, size, 4); !errors.Is(err, errGate) {
		t.Fatalf("gated save: %v", err)
	}
	if _, err := client.Save(path, bytes.NewReader(data), size, 2); !errors.Is(err, client.ErrSessionConflict) {
		t.Errorf("save with another thread count over an open session: %v, want ErrSessionConflict", err)
	}
	if _, err := client.Load(path, &memBuf{b: make([]byte, size)}, 4); !errors.Is(err, client.ErrIncomplete) {
		t.Errorf("load of a file being saved: %v, want ErrIncomplete", err)
	}
	// A save of another source (Options.Source) abandons the session.
	other := testData(7, 16*mib)
	g2 := newGate(6 * mib)
	close(g2.release)
	_, err := client.SaveWith(path, gatedReader{bytes.NewReader(other), g2}, size, client.Options{Threads: 4, Source: "a"})
	if !errors.Is(err, errGate) {
		t.Fatalf("gated save: %v", err)
	}
	st, err := client.SaveWith(path, bytes.NewReader(data), size, client.Options{Threads: 4, Source: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Resumed || st.Skipped != 0 {
		t.Errorf("save of source b over a session of source a resumed it: %+v", st)
	}
	sameFile(t, path, data)
	// The same source resumes.
	g3 := newGate(6 * mib)
	close(g3.release)
	if _, err := client.SaveWith(path, gatedReader{bytes.NewReader(other), g3}, size, client.Options{Threads: 4, Source: "a"}); !errors.Is(err, errGate) {
		t.Fatalf("gated save: %v", err)
	}
	st, err = client.SaveWith(path, bytes.NewReader(other), size, client.Options{Threads: 4, Source: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Resumed || st.Skipped == 0 {
		t.Errorf("save of the same source did not resume: %+v", st)
	}
	sameFile(t, path, other)
	noSession(t, path)

	// A file truncated while its session was open is saved whole: the
	// tails count data the truncate dropped.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fsetxattr(int(f.Fd()), client.XattrSession, []byte("threads=4,size="+strconv.FormatInt(size, 10)), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data[:4*mib], 0); err != nil { // segment 0 whole
		t.Fatal(err)
	}
	if s, err := client.GetSession(path); err != nil || s == nil || !s.Segments[0].Done {
		t.Fatalf("session after segment 0: %+v, %v", s, err)
	}
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	st, err = client.Save(path, bytes.NewReader(data), size, 4)
	if err != nil {
		t.Fatal(err)
	}
	if st.Resumed || st.Skipped != 0 || st.Bytes != size {
		t.Errorf("save over a session whose file was truncated: %+v, want a full save", st)
	}
	sameFile(t, path, data)
}
