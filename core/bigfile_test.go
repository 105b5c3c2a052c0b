package core

import (
	"errors"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// The kernel's MAX_LFS_FILESIZE, the largest size of a file on its local
// file systems (xfstests generic/525 uses it).
const maxLFS = 1<<63 - 1

// checkClean requires recovery.Check to find m clean.
func checkClean(t *testing.T, m pmem.Medium, when string) {
	t.Helper()
	rep, err := recovery.Check(m)
	if err != nil {
		t.Fatalf("%s: fsck: %v", when, err)
	}
	for _, p := range rep.Problems {
		t.Errorf("%s: fsck: %v", when, p)
	}
}

// TestMaxFileSize: a file may be as large as the kernel allows (2^63-1
// bytes): a truncate to it, a write of its last byte (in the block
// (2^63-1)/4096), reads, SEEK_DATA/SEEK_HOLE and a truncate back down
// work, survive a remount and leave the pool clean; a write at 2^63-1 or
// past fails with ErrTooBig, and one crossing it is cut short there, as
// the kernel's generic_write_checks does.
func TestMaxFileSize(t *testing.T) {
	if MaxFileSize != maxLFS {
		t.Fatalf("MaxFileSize %d, want MAX_LFS_FILESIZE %d", int64(MaxFileSize), int64(maxLFS))
	}
	const last = maxLFS - 1             // the last byte's offset
	const lastBlk = uint64(maxLFS) / bs // the block holding it
	fs, m := openTestPool(t)
	in, err := fs.Create(fs.Root(), "f", NewInode{Mode: 0o100644})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Truncate(in, maxLFS); err != nil {
		t.Fatalf("truncate to 2^63-1: %v", err)
	}
	if err := fs.Truncate(in, maxLFS+1); !errors.Is(err, ErrTooBig) {
		t.Errorf("truncate to 2^63: %v, want ErrTooBig", err)
	}
	// The file is one hole: no data, the hole runs to the end.
	if _, err := fs.SeekData(in, 0, false); !errors.Is(err, ErrNoSuchOffset) {
		t.Errorf("SEEK_DATA in an empty 2^63-1 file: %v", err)
	}
	if o, err := fs.SeekData(in, last, true); o != last || err != nil {
		t.Errorf("SEEK_HOLE at the last byte: %d, %v", o, err)
	}
	free := fs.available()
	if n, err := fs.Write(in, last, []byte{0xa5}, false); n != 1 || err != nil {
		t.Fatalf("write at 2^63-2: %d, %v", n, err)
	}
	for _, off := range []int64{maxLFS} {
		if n, err := fs.Write(in, off, []byte{1}, false); n != 0 || !errors.Is(err, ErrTooBig) {
			t.Errorf("write at %d: %d, %v, want ErrTooBig", off, n, err)
		}
	}
	// A write crossing the limit stores what fits, as the kernel's
	// generic_write_checks cuts it.
	if n, err := fs.Write(in, last-1, []byte{0x5a, 0xa5, 9, 9}, false); n != 2 || err != nil {
		t.Errorf("write of 4 bytes at 2^63-3: %d, %v, want 2 written", n, err)
	}
	if n, err := fs.Write(in, 0, nil, false); n != 0 || err != nil {
		t.Errorf("empty write: %d, %v", n, err)
	}
	check := func(when string, in *Inode) {
		t.Helper()
		if a := in.Attr(); a.Size != maxLFS {
			t.Errorf("%s: size %d, want 2^63-1", when, a.Size)
		}
		got := make([]byte, 8192)
		if n, err := fs.ReadAt(in, got, last-1); n != 2 || err != nil || got[0] != 0x5a || got[1] != 0xa5 {
			t.Errorf("%s: read at 2^63-3: %d, %v, % x", when, n, err, got[:2])
		}
		if n, err := fs.ReadAt(in, got, maxLFS-8192); n != 8192 || err != nil || got[8190] != 0x5a || got[8191] != 0xa5 || got[0] != 0 || got[4095] != 0 {
			t.Errorf("%s: read of the last 8 KiB: %d, %v", when, n, err)
		}
		if n, err := fs.ReadAt(in, got, maxLFS); n != 0 || err != nil {
			t.Errorf("%s: read at 2^63-1: %d, %v", when, n, err)
		}
		for _, c := range []struct {
			off  uint64
			hole bool
			want uint64
			err  error
		}{
			{0, false, lastBlk * bs, nil}, {lastBlk*bs - 1, false, lastBlk * bs, nil}, {last, false, last, nil},
			{0, true, 0, nil}, {lastBlk * bs, true, maxLFS, nil}, {last, true, maxLFS, nil},
			{maxLFS, false, 0, ErrNoSuchOffset}, {maxLFS, true, 0, ErrNoSuchOffset}, {1<<64 - 1, true, 0, ErrNoSuchOffset},
		} {
			if got, err := fs.SeekData(in, c.off, c.hole); got != c.want || !errors.Is(err, c.err) {
				t.Errorf("%s: SeekData(%d, hole=%v) = %d, %v; want %d, %v", when, c.off, c.hole, got, err, c.want, c.err)
			}
		}
		in.mu.Lock()
		exts := append([]format.Extent(nil), in.exts...)
		in.mu.Unlock()
		if len(exts) != 1 || exts[0].Logical != lastBlk || exts[0].Len != 1 || exts[0].End() != format.MaxFileBlocks {
			t.Errorf("%s: extents %+v, want one block at %d", when, exts, lastBlk)
		}
	}
	check("after the writes", in)
	if err := fs.Fsync(in); err != nil {
		t.Fatal(err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, m, "a 2^63-1 byte file")
	if fs, _, err = Open(m, Options{}); err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if in, err = fs.Lookup(fs.Root(), "f"); err != nil {
		t.Fatal(err)
	}
	check("after a remount", in)

	got1 := make([]byte, 2)
	// Fallocate may reach the limit and no further; a punch of the last
	// block frees it.
	if err := fs.Fallocate(in, maxLFS-3*bs, 2*bs, FallocKeepSize); err != nil {
		t.Errorf("fallocate below the last block: %v", err)
	}
	if err := fs.Fallocate(in, maxLFS-1, 1, 0); err != nil {
		t.Errorf("fallocate of the last byte: %v", err)
	}
	for _, c := range [][2]uint64{{maxLFS, 1}, {maxLFS - 1, 2}, {1 << 63, 1}, {1, 1<<64 - 1}} {
		if err := fs.Fallocate(in, c[0], c[1], 0); !errors.Is(err, ErrTooBig) {
			t.Errorf("fallocate [%d, +%d): %v, want ErrTooBig", c[0], c[1], err)
		}
	}
	// A punch to the end frees the whole blocks and clears the partial
	// last one (it holds no byte 2^63-1) in place.
	if err := fs.Fallocate(in, (lastBlk-3)*bs, 4*bs-1, FallocPunchHole|FallocKeepSize); err != nil {
		t.Errorf("punching the last 4 blocks: %v", err)
	}
	if o, err := fs.SeekData(in, (lastBlk-4)*bs, false); o != lastBlk*bs || err != nil {
		t.Errorf("SEEK_DATA after the punch: %d, %v", o, err)
	}
	if n, err := fs.ReadAt(in, got1, last-1); n != 2 || err != nil || got1[0] != 0 || got1[1] != 0 {
		t.Errorf("the punched last bytes: %d, %v, % x", n, err, got1)
	}
	if fs.available() != free-1 {
		t.Errorf("after the punch: %d blocks free, want %d", fs.available(), free-1)
	}
	if n, err := fs.Write(in, last, []byte{7}, false); n != 1 || err != nil {
		t.Fatalf("write at 2^63-2 again: %d, %v", n, err)
	}

	// Truncating back down frees the far blocks.
	if err := fs.Truncate(in, bs); err != nil {
		t.Fatal(err)
	}
	in.mu.Lock()
	n := len(in.exts)
	in.mu.Unlock()
	if n != 0 || fs.available() != free {
		t.Errorf("after truncating to 4096: %d extents, %d blocks free, want 0 and %d", n, fs.available(), free)
	}
	// Appending at the limit fails; appending up to it is cut short.
	if err := fs.Truncate(in, maxLFS); err != nil {
		t.Fatal(err)
	}
	if n, err := fs.Write(in, 0, []byte{1}, true); n != 0 || !errors.Is(err, ErrTooBig) {
		t.Errorf("append to a 2^63-1 byte file: %d, %v, want ErrTooBig", n, err)
	}
	if err := fs.Truncate(in, last); err != nil {
		t.Fatal(err)
	}
	if n, err := fs.Write(in, 0, []byte{3, 4}, true); n != 1 || err != nil {
		t.Errorf("append of 2 bytes to a 2^63-2 byte file: %d, %v, want 1 written", n, err)
	}
	got := make([]byte, 1)
	if n, err := fs.ReadAt(in, got, last); n != 1 || err != nil || got[0] != 3 {
		t.Errorf("the appended byte: %d, %v, %d", n, err, got[0])
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, m, "after the truncates")
}
