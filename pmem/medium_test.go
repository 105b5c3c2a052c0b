package pmem

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// allocated returns the bytes the file at path has on disk.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// The emulated medium's WriteAt (a pwrite), Fallocate and Punch act on the
// pool file and the mapping sees them at once.
func TestFileMediumOperations(t *testing.T) {
	path := newPool(t, 4*MinSize)
	m := mustOpen(t, path)
	if m.Kind() != Emulated {
		t.Skipf("pool on %s is %s, not emulated", path, m.Kind())
	}
	data := bytes.Repeat([]byte("pwrite!"), 3000)
	if err := m.WriteAt(data, 5000); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Bytes()[5000:5000+len(data)], data) {
		t.Fatal("the mapping does not show the bytes WriteAt stored")
	}
	for _, c := range []struct{ off, n int64 }{{-1, 1}, {m.Size() - 1, 2}, {m.Size() + 1, 0}} {
		if err := m.WriteAt(make([]byte, c.n), c.off); !errors.Is(err, ErrOutOfBounds) {
			t.Errorf("WriteAt of %d bytes at %d: got %v, want ErrOutOfBounds", c.n, c.off, err)
		}
	}
	if err := m.Persist(5000, int64(len(data))); err != nil {
		t.Fatal(err)
	}

	before := allocated(t, path)
	if err := m.Fallocate(MinSize, 2*MinSize); err != nil {
		t.Fatal(err)
	}
	if got := allocated(t, path); got < before+2*MinSize {
		t.Fatalf("Fallocate of %d bytes: the file holds %d bytes, was %d", 2*MinSize, got, before)
	}
	if !bytes.Equal(m.Bytes()[5000:5000+len(data)], data) {
		t.Fatal("Fallocate changed bytes")
	}

	before = allocated(t, path)
	if err := m.Punch(MinSize, MinSize); err != nil {
		t.Fatal(err)
	}
	if got := allocated(t, path); got > before-MinSize {
		t.Fatalf("Punch of %d bytes gave nothing back: %d bytes, was %d", MinSize, got, before)
	}
	if err := m.Punch(6000, 100); err != nil { // inside a page: cleared in place
		t.Fatal(err)
	}
	want := append([]byte(nil), data...)
	clear(want[1000:1100])
	if !bytes.Equal(m.Bytes()[5000:5000+len(data)], want) {
		t.Fatal("Punch inside a page: wrong bytes")
	}
	if err := m.Fence(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = mustOpen(t, path)
	if !bytes.Equal(m.Bytes()[5000:5000+len(data)], want) {
		t.Fatal("after reopen: the written and punched bytes are not as left")
	}
}

// A pool file on a full file system: Fallocate and WriteAt fail with
// ErrNoSpace instead of a store faulting later.
func TestFileMediumNoSpace(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	path := filepath.Join(dir, "pool")
	if err := Create(path, 4*MinSize, false); err != nil {
		t.Fatal(err)
	}
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Fallocate(0, 4*MinSize); !errors.Is(err, ErrNoSpace) {
		t.Errorf("Fallocate beyond the file system: got %v, want ErrNoSpace", err)
	}
	if err := m.WriteAt(make([]byte, 2*MinSize), MinSize); !errors.Is(err, ErrNoSpace) {
		t.Errorf("WriteAt beyond the file system: got %v, want ErrNoSpace", err)
	}
}

func TestReadOnlyMediumRefusesWrites(t *testing.T) {
	path := newPool(t, MinSize)
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.WriteAt([]byte("x"), 0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("WriteAt: got %v, want ErrReadOnly", err)
	}
	if err := ro.Fallocate(0, 4096); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Fallocate: got %v, want ErrReadOnly", err)
	}
	ro.Close()

	before := fileBytes(t, path)
	p, err := OpenPrivate(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteAt([]byte("private"), 10); err != nil {
		t.Fatal(err)
	}
	if err := p.Fallocate(0, MinSize); err != nil {
		t.Fatal(err)
	}
	if string(p.Bytes()[10:17]) != "private" {
		t.Fatal("a private WriteAt did not stick in the mapping")
	}
	p.Close()
	if !bytes.Equal(fileBytes(t, path), before) {
		t.Fatal("the pool file changed under a private open")
	}
}

func TestMemoryOperations(t *testing.T) {
	m := NewMemory(8192)
	if err := m.WriteAt([]byte("abc"), 100); err != nil || string(m.Bytes()[100:103]) != "abc" {
		t.Fatalf("WriteAt: %v, bytes %q", err, m.Bytes()[100:103])
	}
	if err := m.WriteAt([]byte("abc"), 8190); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("WriteAt past the end: got %v, want ErrOutOfBounds", err)
	}
	if err := m.Fallocate(0, 8192); err != nil {
		t.Fatal(err)
	}
	if err := m.Punch(101, 1); err != nil || string(m.Bytes()[100:103]) != "a\x00c" {
		t.Fatalf("Punch: %v, bytes %q", err, m.Bytes()[100:103])
	}
	if err := m.Fence(); err != nil {
		t.Fatal(err)
	}
}

// The Recorder: WriteAt is a store (durable once flushed and fenced),
// Punch is durable zeros in one fence, Fallocate makes nothing durable.
func TestRecorderOperations(t *testing.T) {
	init := bytes.Repeat([]byte{0xAA}, 4096)
	r := NewRecorder(init)
	if err := r.WriteAt([]byte("data"), 200); err != nil {
		t.Fatal(err)
	}
	if err := r.Fallocate(0, 4096); err != nil {
		t.Fatal(err)
	}
	if r.Fences() != 0 {
		t.Fatal("WriteAt or Fallocate fenced")
	}
	r.Fence()
	if img := r.Image(1); !bytes.Equal(img, init) {
		t.Fatal("an unflushed WriteAt reached the image")
	}
	if err := r.Persist(200, 4); err != nil {
		t.Fatal(err)
	}
	if img := r.Image(2); string(img[200:204]) != "data" {
		t.Fatalf("a persisted WriteAt is not in the image: %q", img[200:204])
	}
	if err := r.Punch(1000, 100); err != nil {
		t.Fatal(err)
	}
	if r.Fences() != 3 {
		t.Fatalf("Punch took %d fences, want 1", r.Fences()-2)
	}
	img := r.Image(3)
	if !bytes.Equal(img[1000:1100], make([]byte, 100)) || img[999] != 0xAA || img[1100] != 0xAA {
		t.Fatal("Punch: the image does not hold exactly the zeros")
	}
}

func TestFaultyInjectNth(t *testing.T) {
	r := NewRecorder(make([]byte, 8192))
	f := NewFaulty(r)
	f.Inject(Injection{Ops: OpWrite, Nth: 2})
	if err := f.WriteAt([]byte("one"), 0); err != nil {
		t.Fatal(err)
	}
	err := f.WriteAt([]byte("two"), 100)
	if !errors.Is(err, ErrInjected) {
		t.Fatalf("second write: got %v, want ErrInjected", err)
	}
	if string(r.Bytes()[100:103]) != "\x00\x00\x00" {
		t.Fatal("a failed write stored bytes")
	}
	if err := f.WriteAt([]byte("three"), 200); err != nil {
		t.Fatal("the third write failed too:", err)
	}
	if got := f.Failures(); len(got) != 1 || got[0].Op != OpWrite || got[0].Index != 2 || got[0].Off != 100 || got[0].Len != 3 {
		t.Fatalf("Failures: %+v", got)
	}
	if f.Ops() != 3 {
		t.Fatalf("Ops %d, want 3", f.Ops())
	}
}

// Every kind of operation can be failed by its index among all of them.
func TestFaultyInjectEachOp(t *testing.T) {
	run := func(f *Faulty) []error {
		return []error{
			f.WriteAt([]byte("w"), 64),     // 1
			f.Fallocate(0, 4096),           // 2
			f.Punch(128, 64),               // 3
			f.Flush(64, 1),                 // 4
			f.Fence(),                      // 5
			f.Persist(4096, 8),             // 6 (flush), 7 (fence)
			f.WriteAt([]byte("v"), 4096*2), // 8
		}
	}
	clean := NewFaulty(NewRecorder(make([]byte, 16384)))
	for _, err := range run(clean) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if clean.Ops() != 8 || clean.OpsOf(OpWrite) != 2 || clean.OpsOf(OpFlush|OpFence) != 4 || clean.OpsOf(OpPunch) != 1 {
		t.Fatalf("Ops %d, writes %d, flushes and fences %d, punches %d; want 8, 2, 4, 1",
			clean.Ops(), clean.OpsOf(OpWrite), clean.OpsOf(OpFlush|OpFence), clean.OpsOf(OpPunch))
	}
	kinds := []Op{OpWrite, OpFallocate, OpPunch, OpFlush, OpFence, OpFlush, OpFence, OpWrite}
	for k := 1; k <= 8; k++ {
		r := NewRecorder(make([]byte, 16384))
		f := NewFaulty(r)
		f.Inject(Injection{Nth: k})
		errs := run(f)
		call := map[int]int{1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5, 7: 5, 8: 6}[k]
		for i, err := range errs {
			if (i == call) != (err != nil) {
				t.Errorf("failing op %d (%s): call %d returned %v", k, kinds[k-1], i, err)
			}
		}
		if fl := f.Failures(); len(fl) != 1 || fl[0].Op != kinds[k-1] || fl[0].Index != k {
			t.Errorf("failing op %d: Failures %+v, want one %s", k, fl, kinds[k-1])
		}
		wantFences := 3 // Fence, Persist's fence, Punch's (the Recorder's own)
		if kinds[k-1] == OpFence || k == 3 {
			wantFences = 2
		}
		if r.Fences() != wantFences {
			t.Errorf("failing op %d (%s): %d fences reached the Recorder, want %d", k, kinds[k-1], r.Fences(), wantFences)
		}
	}
}

func TestFaultyInjectRangeAndEvery(t *testing.T) {
	f := NewFaulty(NewMemory(8192))
	f.Inject(Injection{Ops: OpFlush | OpPunch, Off: 4096, Len: 100})
	if err := f.Flush(0, 4096); err != nil {
		t.Fatal("a flush outside the range failed:", err)
	}
	if err := f.Fence(); err != nil {
		t.Fatal("a fence failed under a ranged injection:", err)
	}
	for i := 0; i < 3; i++ {
		if err := f.Flush(4000, 200); !errors.Is(err, ErrInjected) {
			t.Fatalf("flush %d overlapping the range: got %v", i, err)
		}
	}
	if err := f.Punch(4196, 10); err != nil {
		t.Fatal("a punch past the range failed:", err)
	}
	if err := f.Punch(4100, 10); !errors.Is(err, ErrInjected) {
		t.Fatalf("punch in the range: got %v", err)
	}
	if err := f.WriteAt([]byte("x"), 4100); err != nil {
		t.Fatal("a write (not armed) failed:", err)
	}
	f.Heal()
	if err := f.Flush(4000, 200); err != nil {
		t.Fatal("after Heal:", err)
	}
	custom := errors.New("media gone")
	f.Inject(Injection{Ops: OpFallocate, Err: custom})
	if err := f.Fallocate(0, 10); !errors.Is(err, custom) {
		t.Fatalf("Fallocate with a chosen error: got %v", err)
	}
}

// A torn write stores a prefix and fails; a torn Persist makes only a
// prefix durable.
func TestFaultyTorn(t *testing.T) {
	r := NewRecorder(make([]byte, 8192))
	f := NewFaulty(r)
	data := bytes.Repeat([]byte{7}, 2000)
	f.Inject(Injection{Ops: OpWrite, Nth: 1, Torn: true, TornAt: 300})
	if err := f.WriteAt(data, 1000); !errors.Is(err, ErrInjected) {
		t.Fatalf("torn write: got %v", err)
	}
	b := r.Bytes()
	if !bytes.Equal(b[1000:1300], data[:300]) || b[1300] != 0 || b[999] != 0 {
		t.Fatal("torn write: not exactly the first 300 bytes stored")
	}
	if fl := f.Failures(); len(fl) != 1 || fl[0].Torn != 300 {
		t.Fatalf("Failures: %+v", fl)
	}
	// Default: up to the last sector boundary at or before the middle.
	f.Heal()
	f.Inject(Injection{Ops: OpWrite, Nth: 1, Torn: true})
	if err := f.WriteAt(data, 3000); err == nil {
		t.Fatal("torn write returned nil")
	}
	mid := (int64(3000+1000) &^ (SectorSize - 1)) - 3000
	if !bytes.Equal(b[3000:3000+mid], data[:mid]) || b[3000+mid] != 0 {
		t.Fatalf("sector-torn write: want the first %d bytes", mid)
	}

	// Torn Persist: of a flushed range of 4 cache lines, one reaches media.
	f.Heal()
	copy(b[6000:], bytes.Repeat([]byte{9}, 256))
	n := r.Fences()
	f.Inject(Injection{Ops: OpFlush, Nth: 1, Torn: true, TornAt: 1})
	if err := f.Persist(6016, 256); !errors.Is(err, ErrInjected) {
		t.Fatalf("torn persist: got %v", err)
	}
	if r.Fences() != n+1 {
		t.Fatal("a torn persist did not fence")
	}
	img := r.Image(r.Fences())
	if img[6016] != 9 || img[6079] != 9 || img[6080] != 0 {
		t.Fatalf("torn persist: want the first cache line durable only: %d %d %d", img[6016], img[6079], img[6080])
	}
}

// The flush injections of before Inject still work beside it, and every
// Flush counts as one operation.
func TestFaultyOldAPIBesideInject(t *testing.T) {
	f := NewFaulty(NewMemory(8192))
	f.FailFlushes(1, 1, ErrInjected)
	f.Inject(Injection{Ops: OpFence, Nth: 2})
	if err := f.Flush(0, 1); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(0, 1); err == nil {
		t.Fatal("FailFlushes did not fail the second flush")
	}
	if err := f.Fence(); err != nil {
		t.Fatal(err)
	}
	if err := f.Persist(0, 1); !errors.Is(err, ErrInjected) {
		t.Fatalf("Persist with its fence failed: got %v", err)
	}
	if f.Ops() != 5 || f.FlushFailures() != 1 || f.Fences() != 1 {
		t.Fatalf("ops %d, flush failures %d, fences %d; want 5, 1, 1", f.Ops(), f.FlushFailures(), f.Fences())
	}
}

// BenchmarkWriteFresh compares storing into fresh (sparse) pages of an
// emulated pool with WriteAt (pwrite) and through the mapping, the reason
// WriteAt exists.
func BenchmarkWriteFresh(b *testing.B) {
	const chunk = 1 << 20
	for _, how := range []string{"WriteAt", "mapping"} {
		b.Run(how, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "pool")
			if err := Create(path, 256<<20, false); err != nil {
				b.Fatal(err)
			}
			m, err := Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			if m.Kind() != Emulated {
				b.Skipf("pool is %s", m.Kind())
			}
			buf := bytes.Repeat([]byte{1}, chunk)
			b.SetBytes(chunk)
			off := int64(0)
			for b.Loop() {
				if off+chunk > m.Size() {
					b.StopTimer()
					if err := m.Punch(0, m.Size()); err != nil {
						b.Fatal(err)
					}
					off = 0
					b.StartTimer()
				}
				if how == "WriteAt" {
					if err := m.WriteAt(buf, off); err != nil {
						b.Fatal(err)
					}
				} else {
					copy(m.Bytes()[off:], buf)
				}
				off += chunk
			}
		})
	}
}

func TestFaultyInjectCount(t *testing.T) {
	f := NewFaulty(NewMemory(4096))
	f.Inject(Injection{Ops: OpFlush, Nth: 2, Count: 2})
	var got []bool
	for range 5 {
		got = append(got, f.Flush(0, 1) != nil)
	}
	if want := []bool{false, true, true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("failed flushes %v, want %v", got, want)
	}
}
