package e2e_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAppend: two descriptors opened with O_APPEND write records
// concurrently; every record lands whole, exactly once, at the end.
func TestAppend(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")
	p := fs.Path("log")
	writeFile(t, p, nil, 0o644)
	const recSize, perWriter = 100, 1000
	record := func(w, i int) []byte {
		r := bytes.Repeat([]byte{byte('a' + w)}, recSize)
		copy(r, fmt.Sprintf("w%d-%06d|", w, i))
		r[recSize-1] = '\n'
		return r
	}
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		fd := openFd(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer closeFd(t, fd)
			for i := 0; i < perWriter; i++ {
				rec := record(w, i)
				n, err := retryN(func() (int, error) { return unix.Write(fd, rec) })
				if err != nil || n != recSize {
					t.Errorf("writer %d record %d: n=%d err=%v", w, i, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	data := readFile(t, p)
	if len(data) != 2*perWriter*recSize {
		t.Fatalf("file is %d bytes, want %d", len(data), 2*perWriter*recSize)
	}
	next := [2]int{}
	for off := 0; off < len(data); off += recSize {
		rec := data[off : off+recSize]
		var w, i int
		if _, err := fmt.Sscanf(string(rec), "w%d-%06d|", &w, &i); err != nil || w < 0 || w > 1 {
			t.Fatalf("offset %d: not a record: %q", off, rec)
		}
		if !bytes.Equal(rec, record(w, i)) {
			t.Fatalf("offset %d: torn record %q", off, rec)
		}
		if i != next[w] {
			t.Fatalf("offset %d: writer %d record %d, want record %d (lost or reordered)", off, w, i, next[w])
		}
		next[w]++
	}
	// With O_APPEND a write after lseek(0) still goes to the end.
	fd := openFd(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		t.Fatal(err)
	}
	n, err := retryN(func() (int, error) { return unix.Write(fd, []byte("tail")) })
	closeFd(t, fd)
	if err != nil || n != 4 {
		t.Fatalf("append after lseek(0): n=%d err=%v", n, err)
	}
	data = readFile(t, p)
	if !bytes.HasSuffix(data, []byte("tail")) || len(data) != 2*perWriter*recSize+4 || !bytes.Equal(data[:recSize], record(int(data[1]-'0'), 0)) {
		t.Errorf("after an O_APPEND write at offset 0: size %d, suffix %q", len(data), data[max(0, len(data)-8):])
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")

	t.Run("O_TRUNC", func(t *testing.T) {
		p := fs.Path("otrunc")
		writeFile(t, p, randBytes(1, 100000), 0o644)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		must(t, err)
		if st := lstat(t, p); st.Size != 0 || st.Blocks != 0 {
			t.Errorf("after open(O_TRUNC): size %d blocks %d, want 0 and 0", st.Size, st.Blocks)
		}
		_, err = f.Write([]byte("abc"))
		must(t, err)
		must(t, f.Close())
		wantBytes(t, "after O_TRUNC and a 3-byte write", readFile(t, p), []byte("abc"))
		// Reading the file back at a larger offset finds nothing old.
		fd := openFd(t, p, unix.O_RDWR, 0)
		defer closeFd(t, fd)
		must(t, unix.Ftruncate(fd, 100000))
		got := preadFull(t, fd, 100000, 0)
		if i := firstNonZero(got[3:]); i >= 0 {
			t.Errorf("old data after O_TRUNC and ftruncate grow: byte %d is %#x", i+3, got[i+3])
		}
	})

	t.Run("grow", func(t *testing.T) {
		p := fs.Path("grow")
		writeFile(t, p, []byte("head"), 0o644)
		must(t, os.Truncate(p, 3<<20+5))
		got := readFile(t, p)
		if len(got) != 3<<20+5 || string(got[:4]) != "head" {
			t.Fatalf("after truncate grow: %d bytes, head %q", len(got), got[:min(4, len(got))])
		}
		if i := firstNonZero(got[4:]); i >= 0 {
			t.Errorf("grown region: byte %d is %#x, want zero", i+4, got[i+4])
		}
	})

	// Shrink to a size inside a block, then grow again: the cut part of
	// that block must read as zeros, not as the old bytes.
	t.Run("shrink then grow", func(t *testing.T) {
		p := fs.Path("shrink")
		old := bytes.Repeat([]byte{0xAA}, 3*4096+1000)
		writeFile(t, p, old, 0o644)
		fd := openFd(t, p, unix.O_RDWR, 0)
		defer closeFd(t, fd)
		for _, cut := range []int64{2*4096 + 1234, 4096 + 1, 777} {
			pwriteFull(t, fd, old, 0)
			must(t, unix.Ftruncate(fd, cut))
			if st := fstat(t, fd); st.Size != cut {
				t.Errorf("size after ftruncate(%d): %d", cut, st.Size)
			}
			must(t, unix.Ftruncate(fd, int64(len(old))+5000))
			got := preadFull(t, fd, len(old)+6000, 0)
			if len(got) != len(old)+5000 {
				t.Fatalf("size after regrowing: %d, want %d", len(got), len(old)+5000)
			}
			wantBytes(t, fmt.Sprintf("kept part after cutting to %d", cut), got[:cut], old[:cut])
			if i := firstNonZero(got[cut:]); i >= 0 {
				t.Errorf("cut to %d and regrown: byte %d is %#x, want zero (old data came back)", cut, cut+int64(i), got[cut+int64(i)])
			}
		}
		// Same through truncate(2) on the path.
		pwriteFull(t, fd, old, 0)
		must(t, os.Truncate(p, 5000))
		must(t, os.Truncate(p, 9000))
		got := readFile(t, p)
		wantBytes(t, "truncate(path) kept part", got[:5000], old[:5000])
		if i := firstNonZero(got[5000:]); i >= 0 {
			t.Errorf("truncate(path) shrink+grow: byte %d is %#x, want zero", 5000+i, got[5000+i])
		}
		// And extending with a write past EOF after a shrink.
		must(t, unix.Ftruncate(fd, 100))
		pwriteFull(t, fd, []byte("Z"), 4000)
		got = preadFull(t, fd, 5000, 0)
		if len(got) != 4001 || got[4000] != 'Z' {
			t.Fatalf("after write past EOF: %d bytes", len(got))
		}
		if i := firstNonZero(got[100:4000]); i >= 0 {
			t.Errorf("gap between the cut EOF and a write past it: byte %d is %#x, want zero", 100+i, got[100+i])
		}
	})

	t.Run("sparse pwrite", func(t *testing.T) {
		p := fs.Path("sparse")
		fd := openFd(t, p, unix.O_RDWR|unix.O_CREAT, 0o644)
		defer closeFd(t, fd)
		const off = 1 << 30 // 16 times the pool
		data := randBytes(7, 4096+300)
		pwriteFull(t, fd, data, off)
		st := fstat(t, fd)
		if st.Size != off+int64(len(data)) {
			t.Errorf("size %d, want %d", st.Size, off+len(data))
		}
		if st.Blocks > 64 {
			t.Errorf("st_blocks %d for a sparse file holding %d bytes", st.Blocks, len(data))
		}
		for _, o := range []int64{0, 12345, off / 2, off - 4096} {
			if got := preadFull(t, fd, 4096, o); len(got) != 4096 || firstNonZero(got) >= 0 {
				t.Errorf("hole at %d: %d bytes, first non-zero at %d", o, len(got), firstNonZero(got))
			}
		}
		got := preadFull(t, fd, 8192, off-100)
		if len(got) != 100+len(data) || firstNonZero(got[:100]) >= 0 {
			t.Fatalf("read across the end of the hole: %d bytes", len(got))
		}
		wantBytes(t, "data after the hole", got[100:], data)
	})
}

// TestLargeFile writes a file larger than 4 GiB on a sparse 8 GiB pool.
func TestLargeFile(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "8GiB")
	p := fs.Path("big")
	const far = 5 << 30
	head, tail := randBytes(11, 1<<20), randBytes(12, 1<<20)
	fd := openFd(t, p, unix.O_RDWR|unix.O_CREAT, 0o644)
	pwriteFull(t, fd, tail, far)
	pwriteFull(t, fd, head, 0)
	must(t, unix.Fsync(fd))
	closeFd(t, fd)
	check := func(when string) {
		t.Helper()
		fd := openFd(t, p, unix.O_RDONLY, 0)
		defer closeFd(t, fd)
		st := fstat(t, fd)
		if st.Size != far+1<<20 {
			t.Errorf("%s: size %d, want %d", when, st.Size, int64(far+1<<20))
		}
		if st.Blocks < 2*(1<<20)/512 || st.Blocks > 2*(1<<20)/512+64 {
			t.Errorf("%s: st_blocks %d, want about %d", when, st.Blocks, 2*(1<<20)/512)
		}
		wantBytes(t, when+": first MiB", preadFull(t, fd, 1<<20, 0), head)
		wantBytes(t, when+": MiB at 5 GiB", preadFull(t, fd, 1<<20+100, far), tail)
		across := preadFull(t, fd, 256<<10, far-128<<10)
		if len(across) != 256<<10 {
			t.Fatalf("%s: read across the hole's end: %d bytes", when, len(across))
		}
		if i := firstNonZero(across[:128<<10]); i >= 0 {
			t.Errorf("%s: hole before 5 GiB: byte %d is %#x", when, i, across[i])
		}
		wantBytes(t, when+": data after the hole", across[128<<10:], tail[:128<<10])
		across = preadFull(t, fd, 128<<10, 1<<20-64<<10)
		wantBytes(t, when+": end of the first MiB", across[:64<<10], head[1<<20-64<<10:])
		if i := firstNonZero(across[64<<10:]); i >= 0 {
			t.Errorf("%s: hole after the first MiB: byte %d is %#x", when, i, across[64<<10+i])
		}
		for _, o := range []int64{2 << 30, 4<<30 - 1000, 4 << 30} {
			if got := preadFull(t, fd, 4096, o); firstNonZero(got) >= 0 {
				t.Errorf("%s: hole at %d is not zero", when, o)
			}
		}
	}
	check("after writing")
	fs.Unmount(t)
	fs = fs.Remount(t)
	p = fs.Path("big")
	check("after remount")
}

func TestFallocate(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")

	t.Run("mode 0", func(t *testing.T) {
		fd := openFd(t, fs.Path("alloc"), unix.O_RDWR|unix.O_CREAT, 0o644)
		defer closeFd(t, fd)
		pwriteFull(t, fd, []byte("x"), 0)
		before := fstat(t, fd)
		must(t, retry(func() error { return unix.Fallocate(fd, 0, 0, 1<<20+100) }))
		st := fstat(t, fd)
		if st.Size != 1<<20+100 {
			t.Errorf("size after fallocate: %d, want %d", st.Size, 1<<20+100)
		}
		if st.Blocks < before.Blocks+(1<<20)/512 {
			t.Errorf("st_blocks %d -> %d after allocating 1 MiB", before.Blocks, st.Blocks)
		}
		got := preadFull(t, fd, 2<<20, 0)
		if len(got) != 1<<20+100 || got[0] != 'x' || firstNonZero(got[1:]) >= 0 {
			t.Errorf("contents after fallocate: %d bytes, first non-zero after byte 0 at %d", len(got), firstNonZero(got[1:]))
		}
		// Statfs sees the allocation.
		sf := statfs(t, fs.Mnt)
		must(t, retry(func() error { return unix.Fallocate(fd, 0, 4<<20, 1<<20) }))
		if sf2 := statfs(t, fs.Mnt); sf2.Bfree+256 > sf.Bfree {
			t.Errorf("statfs free blocks %d -> %d after allocating 1 MiB", sf.Bfree, sf2.Bfree)
		}
	})

	t.Run("keep size", func(t *testing.T) {
		fd := openFd(t, fs.Path("keep"), unix.O_RDWR|unix.O_CREAT, 0o644)
		defer closeFd(t, fd)
		data := randBytes(5, 100)
		pwriteFull(t, fd, data, 0)
		before := fstat(t, fd)
		must(t, retry(func() error { return unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 0, 2<<20) }))
		st := fstat(t, fd)
		if st.Size != 100 {
			t.Errorf("size after FALLOC_FL_KEEP_SIZE: %d, want 100", st.Size)
		}
		if st.Blocks < before.Blocks+(2<<20)/512-8 {
			t.Errorf("st_blocks %d -> %d after FALLOC_FL_KEEP_SIZE of 2 MiB", before.Blocks, st.Blocks)
		}
		wantBytes(t, "contents after FALLOC_FL_KEEP_SIZE", preadFull(t, fd, 4096, 0), data)
		// Growing into the preallocated range reads zeros, not garbage.
		must(t, unix.Ftruncate(fd, 1<<20))
		got := preadFull(t, fd, 1<<20, 0)
		wantBytes(t, "head after growing into preallocated blocks", got[:100], data)
		if i := firstNonZero(got[100:]); i >= 0 {
			t.Errorf("preallocated range: byte %d is %#x, want zero", 100+i, got[100+i])
		}
	})

	t.Run("punch hole", func(t *testing.T) {
		fd := openFd(t, fs.Path("punch"), unix.O_RDWR|unix.O_CREAT, 0o644)
		defer closeFd(t, fd)
		data := bytes.Repeat([]byte{0xFF}, 1<<20)
		pwriteFull(t, fd, data, 0)
		before := fstat(t, fd)
		// Not block aligned at either end: 10 whole blocks go, the
		// partial blocks at both ends are cleared in place.
		const off, n = 5*4096 + 100, 11*4096 + 200
		must(t, retry(func() error {
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		}))
		st := fstat(t, fd)
		if st.Size != 1<<20 {
			t.Errorf("size after punching: %d, want %d", st.Size, 1<<20)
		}
		if st.Blocks > before.Blocks-10*8 {
			t.Errorf("st_blocks %d -> %d after punching 10 whole blocks", before.Blocks, st.Blocks)
		}
		want := bytes.Clone(data)
		clear(want[off : off+n])
		wantBytes(t, "after punching a hole", preadFull(t, fd, 2<<20, 0), want)
		// Writing into the hole again works and reads back.
		pwriteFull(t, fd, []byte("refill"), off+4096)
		copy(want[off+4096:], "refill")
		wantBytes(t, "after refilling the hole", preadFull(t, fd, 2<<20, 0), want)
		// Punching past EOF changes nothing.
		must(t, retry(func() error {
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 1<<20, 1<<20)
		}))
		if st := fstat(t, fd); st.Size != 1<<20 {
			t.Errorf("size after punching past EOF: %d", st.Size)
		}
	})

	// Everything survives a remount.
	fs.Unmount(t)
	fs = fs.Remount(t)
	if st := lstat(t, fs.Path("keep")); st.Size != 1<<20 {
		t.Errorf("keep: size %d after remount", st.Size)
	}
	got := readFile(t, fs.Path("punch"))
	if len(got) != 1<<20 || firstNonZero(got[5*4096+100:5*4096+100+4096]) >= 0 || got[0] != 0xFF {
		t.Errorf("punch: hole or data wrong after remount (size %d)", len(got))
	}
}

// TestUnlinkedOpen: a file unlinked while open stays usable through its
// descriptor; its space comes back when it is closed.
func TestUnlinkedOpen(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")
	// The root's first entry block is allocated by the first create and
	// stays: measure after it exists.
	writeFile(t, fs.Path("marker"), nil, 0o644)
	before := statfs(t, fs.Mnt)
	p := fs.Path("doomed")
	data := randBytes(21, 4<<20)
	fd := openFd(t, p, unix.O_RDWR|unix.O_CREAT, 0o644)
	pwriteFull(t, fd, data, 0)
	used := statfs(t, fs.Mnt)
	if used.Bfree > before.Bfree-(4<<20)/4096 {
		t.Errorf("free blocks %d -> %d after writing 4 MiB", before.Bfree, used.Bfree)
	}
	must(t, os.Remove(p))
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("lstat after unlink: %v, want ENOENT", err)
	}
	if ents, _ := os.ReadDir(fs.Mnt); len(ents) != 1 {
		t.Errorf("the root lists %d entries, want 1 (marker)", len(ents))
	}
	if st := fstat(t, fd); st.Nlink != 0 || st.Size != int64(len(data)) {
		t.Errorf("fstat of the unlinked file: nlink %d size %d", st.Nlink, st.Size)
	}
	wantBytes(t, "read through the descriptor after unlink", preadFull(t, fd, len(data), 0), data)
	more := randBytes(22, 1<<20)
	pwriteFull(t, fd, more, int64(len(data)))
	must(t, unix.Fsync(fd))
	wantBytes(t, "appended after unlink", preadFull(t, fd, len(more), int64(len(data))), more)
	if s := statfs(t, fs.Mnt); s.Bfree > used.Bfree {
		t.Errorf("free blocks %d -> %d after unlinking a still-open file: its space came back too early", used.Bfree, s.Bfree)
	}
	// A new file with the same name is a different file.
	writeFile(t, p, []byte("new"), 0o644)
	wantBytes(t, "the old file after creating a new one with its name", preadFull(t, fd, 16, 0), data[:16])
	must(t, os.Remove(p))
	closeFd(t, fd)
	// RELEASE reaches the daemon asynchronously after close.
	var last unix.Statfs_t
	if !eventually(func() bool { last = statfs(t, fs.Mnt); return last.Bfree == before.Bfree }) {
		t.Errorf("free blocks %d after closing the unlinked file, want %d as before it was written", last.Bfree, before.Bfree)
	}
	if last.Ffree != before.Ffree {
		t.Errorf("free inodes %d after closing, want %d", last.Ffree, before.Ffree)
	}
}

// TestFsyncStatfs: fsync/fdatasync succeed, statfs is sane and tracks
// writes and deletes.
func TestFsyncStatfs(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")
	writeFile(t, fs.Path("marker"), nil, 0o644) // allocates the root's entry block
	s0 := statfs(t, fs.Mnt)
	if s0.Bsize != 4096 || s0.Frsize != 4096 {
		t.Errorf("f_bsize %d f_frsize %d, want 4096", s0.Bsize, s0.Frsize)
	}
	if s0.Blocks < 14000 || s0.Blocks > 16384 {
		t.Errorf("f_blocks %d for a 64 MiB pool (16384 blocks of 4 KiB)", s0.Blocks)
	}
	if s0.Bfree > s0.Blocks || s0.Bavail > s0.Bfree || s0.Bfree < s0.Blocks-16 {
		t.Errorf("empty pool: f_blocks %d f_bfree %d f_bavail %d", s0.Blocks, s0.Bfree, s0.Bavail)
	}
	if s0.Files < 1000 || s0.Ffree >= s0.Files || s0.Ffree < s0.Files-3 {
		t.Errorf("f_files %d f_ffree %d", s0.Files, s0.Ffree)
	}
	if s0.Namelen != 255 {
		t.Errorf("f_namelen %d, want 255", s0.Namelen)
	}

	p := fs.Path("f")
	fd := openFd(t, p, unix.O_RDWR|unix.O_CREAT, 0o644)
	pwriteFull(t, fd, randBytes(3, 1<<20), 0)
	must(t, retry(func() error { return unix.Fsync(fd) }))
	must(t, retry(func() error { return unix.Fdatasync(fd) }))
	pwriteFull(t, fd, []byte("overwrite"), 10) // no allocation
	must(t, retry(func() error { return unix.Fdatasync(fd) }))
	must(t, retry(func() error { return unix.Fsync(fd) }))
	closeFd(t, fd)
	dfd := openFd(t, fs.Mnt, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, retry(func() error { return unix.Fsync(dfd) }))
	closeFd(t, dfd)

	s1 := statfs(t, fs.Mnt)
	if s1.Blocks != s0.Blocks {
		t.Errorf("f_blocks changed %d -> %d", s0.Blocks, s1.Blocks)
	}
	if s1.Bfree > s0.Bfree-256 {
		t.Errorf("f_bfree %d -> %d after writing 1 MiB, want a drop of at least 256", s0.Bfree, s1.Bfree)
	}
	if s1.Ffree != s0.Ffree-1 {
		t.Errorf("f_ffree %d -> %d after creating one file", s0.Ffree, s1.Ffree)
	}
	must(t, os.Remove(p))
	var s2 unix.Statfs_t
	if !eventually(func() bool { s2 = statfs(t, fs.Mnt); return s2.Bfree == s0.Bfree }) {
		t.Errorf("f_bfree %d after deleting the file, want %d", s2.Bfree, s0.Bfree)
	}
}

// TestConcurrentWriters: 8 goroutines each fill their own 4 MiB region of
// one file with 64 KiB pwrites in a random order.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "128MiB")
	p := fs.Path("shared")
	const writers, region, chunk = 8, 4 << 20, 64 << 10
	writeFile(t, p, nil, 0o644)
	want := randBytes(99, writers*region)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fd, err := retryN(func() (int, error) { return unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0) })
			if err != nil {
				t.Errorf("writer %d: open: %v", w, err)
				return
			}
			defer unix.Close(fd)
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for _, c := range rng.Perm(region / chunk) {
				off := int64(w*region + c*chunk)
				b := want[off : off+chunk]
				for len(b) > 0 {
					n, err := retryN(func() (int, error) { return unix.Pwrite(fd, b, off) })
					if err != nil {
						t.Errorf("writer %d: pwrite at %d: %v", w, off, err)
						return
					}
					b, off = b[n:], off+int64(n)
				}
			}
		}()
	}
	wg.Wait()
	got := readFile(t, p)
	if len(got) != len(want) {
		t.Fatalf("file is %d bytes, want %d", len(got), len(want))
	}
	for w := 0; w < writers; w++ {
		lo, hi := w*region, (w+1)*region
		if !bytes.Equal(got[lo:hi], want[lo:hi]) {
			i := mismatch(got[lo:hi], want[lo:hi])
			t.Errorf("writer %d's region: byte %d (file offset %d) is %#x, want %#x", w, i, lo+i, got[lo+i], want[lo+i])
		}
	}
}

// mknod creates an empty regular file with one MKNOD request.
func mknod(path string) error {
	return retry(func() error { return unix.Mknod(path, unix.S_IFREG|0o644, 0) })
}

// readNames lists dir with one opendir/getdents pass, in the order the
// file system returns, "." and ".." excluded.
func readNames(t testing.TB, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	must(t, err)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	return names
}

func TestBigDirectory(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "256MiB")
	d := fs.Path("big")
	must(t, os.Mkdir(d, 0o755))
	const n = 3000
	name := func(i int) string { return fmt.Sprintf("entry-%05d-%s", i, strings.Repeat("x", i%40)) }
	for i := 0; i < n; i++ {
		if i%100 == 0 { // a few with contents, the rest with one MKNOD each
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], uint32(i))
			writeFile(t, filepath.Join(d, name(i)), b[:], 0o644)
			continue
		}
		must(t, mknod(filepath.Join(d, name(i))))
	}
	names := readNames(t, d)
	seen := map[string]int{}
	for _, nm := range names {
		seen[nm]++
	}
	for i := 0; i < n; i++ {
		if c := seen[name(i)]; c != 1 {
			t.Errorf("%s listed %d times", name(i), c)
		}
		delete(seen, name(i))
	}
	for nm := range seen {
		t.Errorf("unexpected entry %q", nm)
	}
	if len(names) != n {
		t.Errorf("readdir returned %d names, want %d", len(names), n)
	}
	inos := map[uint64]string{}
	for i := 0; i < n; i++ {
		st := lstat(t, filepath.Join(d, name(i)))
		wantSize := int64(0)
		if i%100 == 0 {
			wantSize = 4
		}
		if st.Size != wantSize || st.Mode != unix.S_IFREG|0o644 || st.Nlink != 1 {
			t.Errorf("%s: size %d mode %o nlink %d, want size %d mode 100644 nlink 1", name(i), st.Size, st.Mode, st.Nlink, wantSize)
		}
		if other, dup := inos[st.Ino]; dup {
			t.Errorf("%s and %s have the same inode number %d", name(i), other, st.Ino)
		}
		inos[st.Ino] = name(i)
	}
	for i := 0; i < n; i += 100 {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(i))
		wantBytes(t, name(i), readFile(t, filepath.Join(d, name(i))), b[:])
	}
	// Deleting every tenth one leaves exactly the rest.
	for i := 0; i < n; i += 10 {
		must(t, os.Remove(filepath.Join(d, name(i))))
	}
	names = readNames(t, d)
	sort.Strings(names)
	var wantNames []string
	for i := 0; i < n; i++ {
		if i%10 != 0 {
			wantNames = append(wantNames, name(i))
		}
	}
	sort.Strings(wantNames)
	if strings.Join(names, "\n") != strings.Join(wantNames, "\n") {
		t.Errorf("after deleting every tenth entry: %d names listed, want %d", len(names), len(wantNames))
	}
}

// TestReaddirUnderChurn: while another goroutine creates and deletes other
// names in the directory, every listing contains each of 500 fixed names
// exactly once.
func TestReaddirUnderChurn(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "128MiB")
	d := fs.Path("dir")
	must(t, os.Mkdir(d, 0o755))
	const fixed = 500
	fixedName := func(i int) string { return fmt.Sprintf("fixed-%03d", i) }
	// Interleave the fixed names with some churn names so that slots
	// between fixed entries come and go.
	for i := 0; i < fixed; i++ {
		must(t, mknod(filepath.Join(d, fixedName(i))))
		if i%4 == 0 {
			must(t, mknod(filepath.Join(d, fmt.Sprintf("churn-%d", i))))
		}
	}
	var stop atomic.Bool
	var churnOps atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := rand.New(rand.NewPCG(5, 5))
		for !stop.Load() {
			p := filepath.Join(d, fmt.Sprintf("churn-%d", rng.IntN(2*fixed)))
			if rng.IntN(2) == 0 {
				if err := mknod(p); err != nil && !os.IsExist(err) {
					t.Errorf("churn: %v", err)
					return
				}
			} else if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				t.Errorf("churn: %v", err)
				return
			}
			if rng.IntN(10) == 0 {
				q := filepath.Join(d, fmt.Sprintf("churn-%d", rng.IntN(2*fixed)))
				_ = rename(p, q)
			}
			churnOps.Add(1)
		}
	}()
	listings := 0
	for listings < 20 || churnOps.Load() < 1000 {
		if listings > 2000 {
			break
		}
		names := readNames(t, d)
		count := make(map[string]int, len(names))
		for _, nm := range names {
			count[nm]++
		}
		bad := 0
		for i := 0; i < fixed; i++ {
			if c := count[fixedName(i)]; c != 1 {
				if bad < 5 {
					t.Errorf("listing %d: %s appears %d times", listings, fixedName(i), c)
				}
				bad++
			}
		}
		for nm := range count {
			if !strings.HasPrefix(nm, "fixed-") && !strings.HasPrefix(nm, "churn-") {
				t.Errorf("listing %d: unexpected name %q", listings, nm)
			}
		}
		listings++
		if t.Failed() {
			break
		}
	}
	stop.Store(true)
	<-done
	t.Logf("%d listings during %d churn operations", listings, churnOps.Load())
	if churnOps.Load() == 0 {
		t.Error("the churn goroutine made no progress")
	}
}
