package e2e_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// mmapSize is deliberately not a multiple of the page size.
const mmapSize = 3<<20 + 123

func mmapFd(t testing.TB, fd, size, prot, flags int) []byte {
	t.Helper()
	m, err := unix.Mmap(fd, 0, size, prot, flags)
	if err != nil {
		t.Fatalf("mmap(fd %d, %d bytes, prot %#x, flags %#x): %v", fd, size, prot, flags, err)
	}
	return m
}

func munmap(t testing.TB, m []byte) {
	t.Helper()
	if err := unix.Munmap(m); err != nil {
		t.Errorf("munmap: %v", err)
	}
}

func TestMmap(t *testing.T) {
	t.Parallel()
	mmapSuite(t, newFS(t, "64MiB"))
}

// TestMmapReadCache runs the same checks on a mount whose read-only opens
// go through the kernel page cache.
func TestMmapReadCache(t *testing.T) {
	t.Parallel()
	fs := mmapSuite(t, newFS(t, "64MiB", "--read-cache"))

	// A cached read-only open must not serve bytes that a later write
	// replaced.
	p := fs.Path("cached")
	a, b := randBytes(51, 200000), randBytes(52, 200000)
	writeFile(t, p, a, 0o644)
	wantBytes(t, "first read (fills the cache)", readFile(t, p), a)
	fd := openFd(t, p, unix.O_WRONLY, 0)
	pwriteFull(t, fd, b, 0)
	closeFd(t, fd)
	wantBytes(t, "read-only open after a write", readFile(t, p), b)
	writeFile(t, p, a[:1000], 0o644) // truncating rewrite
	wantBytes(t, "read-only open after truncate and rewrite", readFile(t, p), a[:1000])
}

// mmapSuite runs the mmap checks on fs; the last one remounts it, and the
// new mount is returned.
func mmapSuite(t *testing.T, fs *harness.FS) *harness.FS {
	t.Run("write, msync, pread", func(t *testing.T) {
		p := fs.Path("msync")
		data := randBytes(41, mmapSize)
		fd := openFd(t, p, unix.O_RDWR|unix.O_CREAT, 0o644)
		defer closeFd(t, fd)
		must(t, unix.Ftruncate(fd, mmapSize))
		m := mmapFd(t, fd, mmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		copy(m, data)
		must(t, retry(func() error { return unix.Msync(m, unix.MS_SYNC) }))
		wantBytes(t, "pread on the mapped descriptor after msync", preadFull(t, fd, mmapSize+10, 0), data)
		wantBytes(t, "read through a new descriptor after msync", readFile(t, p), data)
		// A second round of writes into the same, now allocated, pages.
		copy(m[4000:], "second round")
		copy(data[4000:], "second round")
		must(t, retry(func() error { return unix.Msync(m, unix.MS_SYNC) }))
		wantBytes(t, "after overwriting through the mapping", readFile(t, p), data)
		munmap(t, m)
		if st := lstat(t, p); st.Size != mmapSize || st.Blocks < mmapSize/512 {
			t.Errorf("after mmap writes: size %d blocks %d", st.Size, st.Blocks)
		}
	})

	t.Run("write, munmap, pread", func(t *testing.T) {
		p := fs.Path("munmap")
		data := randBytes(42, mmapSize)
		fd := openFd(t, p, unix.O_RDWR|unix.O_CREAT, 0o644)
		must(t, unix.Ftruncate(fd, mmapSize))
		m := mmapFd(t, fd, mmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		copy(m, data)
		munmap(t, m) // no msync
		wantBytes(t, "pread on the descriptor after munmap", preadFull(t, fd, mmapSize+10, 0), data)
		closeFd(t, fd)
		wantBytes(t, "read through a new descriptor after munmap and close", readFile(t, p), data)
	})

	t.Run("pwrite seen by an existing mapping", func(t *testing.T) {
		p := fs.Path("coherent")
		data := randBytes(43, mmapSize)
		writeFile(t, p, data, 0o644)
		rfd := openFd(t, p, unix.O_RDONLY, 0)
		defer closeFd(t, rfd)
		m := mmapFd(t, rfd, mmapSize, unix.PROT_READ, unix.MAP_SHARED)
		defer munmap(t, m)
		wantBytes(t, "mapping before the write", m, data) // faults every page in
		wfd := openFd(t, p, unix.O_WRONLY, 0)
		defer closeFd(t, wfd)
		for i, off := range []int{5000, 2<<20 + 7, mmapSize - 50, 0} {
			patch := bytes.Repeat([]byte{byte(0xA0 + i)}, 3000)
			if off+len(patch) > mmapSize {
				patch = patch[:mmapSize-off]
			}
			pwriteFull(t, wfd, patch, int64(off))
			copy(data[off:], patch)
			// pwrite has returned: the mapping must show the bytes now.
			if !bytes.Equal(m, data) {
				t.Errorf("mapping after pwrite #%d at %d returned: %s", i, off, firstDiff(m, data))
			}
		}
	})

	t.Run("O_RDONLY mapping", func(t *testing.T) {
		p := fs.Path("rdonly")
		data := randBytes(44, mmapSize)
		writeFile(t, p, data, 0o644)
		fd := openFd(t, p, unix.O_RDONLY, 0)
		defer closeFd(t, fd)
		m := mmapFd(t, fd, mmapSize, unix.PROT_READ, unix.MAP_SHARED)
		wantBytes(t, "shared read-only mapping", m, data)
		munmap(t, m)
		m = mmapFd(t, fd, mmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
		wantBytes(t, "private mapping", m, data)
		copy(m, "private change") // copy-on-write: never reaches the file
		munmap(t, m)
		wantBytes(t, "file after writing into a private mapping", readFile(t, p), data)
		// A writable shared mapping of a read-only descriptor is refused.
		if m, err := unix.Mmap(fd, 0, mmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
			munmap(t, m)
			t.Error("PROT_WRITE MAP_SHARED mapping of an O_RDONLY descriptor succeeded")
		} else {
			wantErrno(t, "writable shared mapping of an O_RDONLY descriptor", err, unix.EACCES)
		}
	})

	// The remount is the parent test's: a mount started in a subtest is
	// unmounted when the subtest ends, and the caller goes on with it.
	p := "persist"
	data := randBytes(45, mmapSize)
	fd := openFd(t, fs.Path(p), unix.O_RDWR|unix.O_CREAT, 0o644)
	must(t, unix.Ftruncate(fd, mmapSize))
	m := mmapFd(t, fd, mmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	copy(m, data)
	must(t, retry(func() error { return unix.Msync(m, unix.MS_SYNC) }))
	munmap(t, m)
	closeFd(t, fd)
	fs.Unmount(t)
	fs = fs.Remount(t)
	t.Run("survives remount", func(t *testing.T) {
		got, err := os.ReadFile(fs.Path(p))
		must(t, err)
		wantBytes(t, "mmap-written file after remount", got, data)
		for _, name := range []string{"msync", "munmap", "coherent", "rdonly"} {
			if st, err := os.Stat(fs.Path(name)); err != nil || st.Size() != mmapSize {
				t.Errorf("%s after remount: %v", name, err)
			}
		}
	})
	return fs
}

// TestMmapPageCache runs the mmap checks on a mount whose opens all go
// through the kernel page cache (--page-cache), checks that a second read
// of a read-write open is served from the page cache, and races pwrite(2)
// against stores to the same pages of a shared mapping as xfstests
// generic/346 (holetest -w) does. With direct I/O (the default) a page
// faulted in while a pwrite is in flight can keep the old bytes and be
// written back over the pwrite (README, "Known differences"); in
// page-cache mode write(2) and the mapping share one page cache.
func TestMmapPageCache(t *testing.T) {
	t.Parallel()
	fs := mmapSuite(t, newFS(t, "256MiB", "--page-cache"))

	p := fs.Path("cached")
	writeFile(t, p, randBytes(53, 1<<20), 0o644)
	fd := openFd(t, p, unix.O_RDWR, 0)
	before := statusCount(t, fs, "read_bytes")
	preadFull(t, fd, 1<<20, 0)
	preadFull(t, fd, 1<<20, 0)
	closeFd(t, fd)
	if got := statusCount(t, fs, "read_bytes") - before; got != 1<<20 {
		t.Errorf("two reads of 1 MiB through one read-write open: the daemon served %d bytes, want 1 MiB (the second from the page cache)", got)
	}

	const pages, page = 256, 4096
	for round := 0; round < 20; round++ {
		p := fs.Path(fmt.Sprintf("race%d", round))
		fd := openFd(t, p, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC, 0o644)
		must(t, unix.Ftruncate(fd, pages*page))
		m := mmapFd(t, fd, pages*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		wmark, smark := uint64(0x5752495445000000+round), uint64(0x53544f5245000000+round)
		done := make(chan error, 1)
		go func() {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], wmark)
			for i := 0; i < pages; i++ {
				if _, err := unix.Pwrite(fd, b[:], int64(i*page)); err != nil {
					done <- fmt.Errorf("pwrite page %d: %v", i, err)
					return
				}
			}
			done <- nil
		}()
		for i := 0; i < pages; i++ {
			binary.LittleEndian.PutUint64(m[i*page+page/2:], smark)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		must(t, retry(func() error { return unix.Msync(m, unix.MS_SYNC) }))
		munmap(t, m)
		got := preadFull(t, fd, pages*page, 0)
		closeFd(t, fd)
		for i := 0; i < pages; i++ {
			if binary.LittleEndian.Uint64(got[i*page:]) != wmark || binary.LittleEndian.Uint64(got[i*page+page/2:]) != smark {
				t.Fatalf("round %d, page %d: lost a pwrite or a store: % x", round, i, got[i*page:i*page+8])
			}
		}
	}
}
