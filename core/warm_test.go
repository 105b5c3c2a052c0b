package core

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
	"github.com/dnnfs/dnnfs/pmem"
)

// warmPool is an emulated pool of 64 MiB in a file of a temporary
// directory (a tmpfs one when /dev/shm exists, as the pools this is for).
type warmPool struct {
	t    *testing.T
	path string
	m    pmem.Medium
	fs   *FS
}

func newWarmPool(t *testing.T, opts Options) *warmPool {
	t.Helper()
	dir := t.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "dnnfs-warm-test-"); err == nil {
			dir = d
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	p := &warmPool{t: t, path: filepath.Join(dir, "pool")}
	if err := pmem.Create(p.path, 64<<20, false); err != nil {
		t.Fatal(err)
	}
	p.open(opts)
	if p.m.Kind() != pmem.Emulated {
		t.Skipf("pool medium is %v, not emulated", p.m.Kind())
	}
	return p
}

func (p *warmPool) open(opts Options) {
	p.t.Helper()
	m, err := pmem.Open(p.path)
	if err != nil {
		p.t.Fatal(err)
	}
	if m.Kind() == pmem.Emulated && p.fs == nil {
		if err := Format(m, 0, 0); err != nil {
			p.t.Fatal(err)
		}
	}
	opts.CommitInterval = -1
	fs, _, err := Open(m, opts)
	if err != nil {
		p.t.Fatal(err)
	}
	p.m, p.fs = m, fs
	p.t.Cleanup(func() {
		fs.Close()
		if p.m == m { // else closeAndCheck checked it
			pmemtest.CheckNow(p.t, m)
		}
		m.Close()
	})
}

// closeAndCheck unmounts cleanly and runs the checker: it must be clean.
func (p *warmPool) closeAndCheck() {
	p.t.Helper()
	if err := p.fs.Close(); err != nil {
		p.t.Fatal(err)
	}
	if err := p.m.Close(); err != nil {
		p.t.Fatal(err)
	}
	p.m = nil
	m, err := pmem.Open(p.path)
	if err != nil {
		p.t.Fatal(err)
	}
	defer m.Close()
	pmemtest.CheckNow(p.t, m)
}

// allocated is the pool file's allocated size (st_blocks).
func (p *warmPool) allocated() int64 {
	p.t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p.path, &st); err != nil {
		p.t.Fatal(err)
	}
	return st.Blocks * 512
}

// save writes a file of n bytes of b as ckpt.tmp, fsyncs it and renames
// it over name, as a checkpoint save does; it returns the new inode.
func (p *warmPool) save(name string, n int, b byte) *Inode {
	p.t.Helper()
	fs := p.fs
	in, err := fs.Create(fs.Root(), "ckpt.tmp", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		p.t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{b}, 1<<20)
	for off := 0; off < n; off += len(chunk) {
		if _, err := fs.Write(in, int64(off), chunk[:min(len(chunk), n-off)], false); err != nil {
			p.t.Fatal(err)
		}
	}
	if err := fs.Fsync(in); err != nil {
		p.t.Fatal(err)
	}
	if err := fs.Rename(fs.Root(), "ckpt.tmp", fs.Root(), name, 0); err != nil {
		p.t.Fatal(err)
	}
	return in
}

// physBlocks is the set of pool blocks in holds.
func physBlocks(in *Inode) map[Blk]bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := map[Blk]bool{}
	for _, e := range in.exts {
		for i := uint64(0); i < e.Len; i++ {
			s[e.Phys+Blk(i)] = true
		}
	}
	return s
}

// TestWarmReuse: a save that replaces a checkpoint leaves the old one's
// blocks warm (still in the pool file), and the next save takes exactly
// those, in few extents, before blocks never used; the pool file does not
// grow. fsck stays clean.
func TestWarmReuse(t *testing.T) {
	p := newWarmPool(t, Options{WarmBytes: 16 << 20, WarmDecay: time.Hour})
	first := physBlocks(p.save("ckpt", 8<<20, 1))
	p.save("ckpt", 8<<20, 2) // frees the first save's blocks
	if w := p.fs.Warm(); w.Warm != 8<<20 || w.PunchedCap != 0 || w.PunchedDecay != 0 {
		t.Fatalf("after replacing an 8 MiB checkpoint: %+v, want 8 MiB warm", w)
	}
	before := p.allocated()
	third := p.save("ckpt", 8<<20, 3)
	got := physBlocks(third)
	for b := range got {
		if !first[b] {
			t.Fatalf("the third save took block %d, not one of the first save's (warm) blocks", b)
		}
	}
	if len(got) != len(first) {
		t.Fatalf("third save holds %d blocks, want %d", len(got), len(first))
	}
	third.mu.Lock()
	n := len(third.exts)
	third.mu.Unlock()
	if n > 2 {
		t.Errorf("the third save has %d extents, want the warm run's 1 or 2", n)
	}
	if after := p.allocated(); after > before {
		t.Errorf("pool file grew from %d to %d bytes writing into warm blocks", before, after)
	}
	p.closeAndCheck()
}

// TestWarmCap: warm blocks past --warm-bytes are punched at once, the
// oldest first, and the pool file gives their space back.
func TestWarmCap(t *testing.T) {
	p := newWarmPool(t, Options{WarmBytes: 4 << 20, WarmDecay: time.Hour})
	p.save("a", 8<<20, 1)
	p.save("b", 2<<20, 1)
	before := p.allocated()
	if err := p.fs.Unlink(p.fs.Root(), "a"); err != nil {
		t.Fatal(err)
	}
	w := p.fs.Warm()
	if w.Warm != 4<<20 || w.PunchedCap != 4<<20 {
		t.Fatalf("after freeing 8 MiB with a 4 MiB cap: %+v, want 4 MiB warm and 4 MiB punched", w)
	}
	if got := before - p.allocated(); got != 4<<20 {
		t.Errorf("the pool file gave back %d bytes, want 4 MiB", got)
	}
	p.closeAndCheck()
}

// TestWarmDecay: warm blocks unused for the decay time are punched (here
// by asking with a clock past it, then by the decay goroutine itself).
func TestWarmDecay(t *testing.T) {
	p := newWarmPool(t, Options{WarmBytes: 16 << 20, WarmDecay: time.Hour})
	p.save("a", 4<<20, 1)
	before := p.allocated()
	if err := p.fs.Unlink(p.fs.Root(), "a"); err != nil {
		t.Fatal(err)
	}
	if w := p.fs.Warm(); w.Warm != 4<<20 {
		t.Fatalf("after freeing 4 MiB: %+v", w)
	}
	p.fs.punchDecayed(time.Now()) // not an hour old yet
	if w := p.fs.Warm(); w.Warm != 4<<20 || w.PunchedDecay != 0 {
		t.Fatalf("punched before the decay time: %+v", w)
	}
	p.fs.punchDecayed(time.Now().Add(2 * time.Hour))
	if w := p.fs.Warm(); w.Warm != 0 || w.PunchedDecay != 4<<20 {
		t.Fatalf("after the decay time: %+v, want 0 warm and 4 MiB punched", w)
	}
	if got := before - p.allocated(); got != 4<<20 {
		t.Errorf("the pool file gave back %d bytes, want 4 MiB", got)
	}
	p.closeAndCheck()

	// The goroutine: a 1 ms decay empties the warm set by itself.
	q := newWarmPool(t, Options{WarmBytes: 16 << 20, WarmDecay: time.Millisecond})
	q.save("a", 4<<20, 1)
	if err := q.fs.Unlink(q.fs.Root(), "a"); err != nil {
		t.Fatal(err)
	}
	// Wait for the punch count: the warm count drops when the goroutine
	// claims the blocks, before its punch (outside the allocator's lock)
	// is done and counted.
	for q.fs.Warm().PunchedDecay < 4<<20 {
		time.Sleep(time.Millisecond)
	}
	if w := q.fs.Warm(); w.Warm != 0 || w.PunchedDecay != 4<<20 {
		t.Fatalf("decay goroutine: %+v, want 0 warm and 4 MiB punched", w)
	}
	q.closeAndCheck()
}

// TestWarmOff: --warm-bytes 0 punches freed blocks at once, as before.
func TestWarmOff(t *testing.T) {
	p := newWarmPool(t, Options{WarmBytes: -1})
	p.save("a", 4<<20, 1)
	before := p.allocated()
	if err := p.fs.Unlink(p.fs.Root(), "a"); err != nil {
		t.Fatal(err)
	}
	if w := p.fs.Warm(); w.Warm != 0 || w.Cap != 0 {
		t.Fatalf("warm blocks with the cap at 0: %+v", w)
	}
	if got := before - p.allocated(); got != 4<<20 {
		t.Errorf("the pool file gave back %d bytes, want 4 MiB", got)
	}
	p.closeAndCheck()
}

// TestWarmNeverData: a new file written partly into warm blocks reads
// zeros wherever it was not written (holes, and the rest of partly
// written blocks), never the old file's bytes; also after a remount,
// which finds the warm blocks still backed in the pool file.
func TestWarmNeverData(t *testing.T) {
	p := newWarmPool(t, Options{WarmBytes: 16 << 20, WarmDecay: time.Hour})
	check := func(name string) {
		t.Helper()
		fs := p.fs
		in, err := fs.Create(fs.Root(), name, NewInode{Mode: format.ModeReg | 0o644})
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 4<<20)
		for _, w := range []struct{ off, n int }{{100, 10}, {1<<20 + 4000, 200}, {3 << 20, 4096}} {
			data := bytes.Repeat([]byte{7}, w.n)
			if _, err := fs.Write(in, int64(w.off), data, false); err != nil {
				t.Fatal(err)
			}
			copy(want[w.off:], data)
		}
		if err := fs.Truncate(in, uint64(len(want))); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if n, err := fs.ReadAt(in, got, 0); err != nil || n != len(got) {
			t.Fatalf("read %d, %v", n, err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("%s: byte %d reads %#x, want %#x (an old file's data?)", name, i, got[i], want[i])
		}
	}
	p.save("old", 4<<20, 0xAA)
	if err := p.fs.Unlink(p.fs.Root(), "old"); err != nil {
		t.Fatal(err)
	}
	if p.fs.Warm().Warm != 4<<20 {
		t.Fatalf("warm %+v", p.fs.Warm())
	}
	check("new")
	// Fill the warm blocks with old bytes again, free them, remount.
	if err := p.fs.Unlink(p.fs.Root(), "new"); err != nil {
		t.Fatal(err)
	}
	p.save("old", 4<<20, 0xBB)
	if err := p.fs.Unlink(p.fs.Root(), "old"); err != nil {
		t.Fatal(err)
	}
	if err := p.fs.Close(); err != nil {
		t.Fatal(err)
	}
	p.m.Close()
	p.open(Options{WarmBytes: 16 << 20, WarmDecay: time.Hour})
	if w := p.fs.Warm(); w.Warm < 4<<20 {
		t.Fatalf("after a remount: %+v, want at least the 4 MiB freed before it warm", w)
	}
	check("new2")
	p.closeAndCheck()
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
