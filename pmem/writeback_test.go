//go:build linux

package pmem

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dirtyPages is the number of dirty (not yet written back) pages of the
// pool file in [off, off+n), from cachestat(2).
func dirtyPages(t *testing.T, m *fileMedium, off, n int64) uint64 {
	t.Helper()
	var cs unix.Cachestat_t
	err := unix.Cachestat(uint(m.fd), &unix.CachestatRange{Off: uint64(off), Len: uint64(n)}, &cs, 0)
	if errors.Is(err, unix.ENOSYS) {
		t.Skipf("no cachestat(2): %v", err)
	}
	if err != nil {
		t.Fatalf("cachestat: %v", err)
	}
	return cs.Dirty
}

// A large store into an emulated pool on a disk file system starts its
// write-back at once, without a flush; a small one is left dirty for the
// flush (DESIGN.md §An fsync).
func TestLargeWriteStartsWriteback(t *testing.T) {
	dir, err := os.MkdirTemp("/var/tmp", "dnnfs-writeback-")
	if err != nil {
		t.Skipf("no /var/tmp: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Type == unix.TMPFS_MAGIC {
		t.Skip("/var/tmp is a tmpfs: nothing is written back")
	}
	path := filepath.Join(dir, "pool")
	if err := Create(path, 16<<20, false); err != nil {
		t.Fatal(err)
	}
	md, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	m := md.(*fileMedium)
	if m.Kind() != Emulated || m.wbq == nil {
		t.Fatalf("kind %v, write-back goroutine %v: want an emulated pool that writes back early", m.Kind(), m.wbq != nil)
	}

	// Each try stores a large range, then a byte below and above it, and
	// waits for the large one to be written back; the small ones must
	// still be dirty then, or something else (a sync(2) of another
	// process) wrote back the file and the try proves nothing.
	big := make([]byte, 4*writebackMin)
	for i := range big {
		big[i] = byte(i)
	}
	const off = 4 << 20
	for try := 0; ; try++ {
		if err := m.WriteAt(big, off); err != nil {
			t.Fatal(err)
		}
		small := []int64{int64(try * 4096), int64(12<<20 + try*4096)}
		for _, o := range small {
			if err := m.WriteAt([]byte{1}, o); err != nil {
				t.Fatal(err)
			}
			// The premise: cachestat sees a store nothing wrote back.
			if d := dirtyPages(t, m, o, 4096); d != 1 {
				t.Fatalf("small store at %d: %d dirty pages, want 1", o, d)
			}
		}
		// The kernel would leave these pages dirty for
		// dirty_expire_centisecs (30 s by default); the write-back
		// goroutine starts them at once.
		deadline := time.Now().Add(20 * time.Second)
		for {
			d := dirtyPages(t, m, off, int64(len(big)))
			if d == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("large store: %d of %d pages still dirty: its write-back was not started", d, len(big)/4096)
			}
			time.Sleep(time.Millisecond)
		}
		if dirtyPages(t, m, small[0], 4096) == 1 && dirtyPages(t, m, small[1], 4096) == 1 {
			break
		}
		if try == 10 {
			t.Skip("the small stores were written back too in every try: something keeps syncing this file system")
		}
	}
	if err := m.Persist(off, int64(len(big))); err != nil {
		t.Fatal(err)
	}
	if n := m.WritebackErrors(); n != 0 {
		t.Fatalf("WritebackErrors %d, want 0", n)
	}
}
