package fs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
	"github.com/dnnfs/dnnfs/pmem"
)

var errInjected = errors.New("injected write-back failure")

// mountFaulty mounts, in this process, a pool whose medium fails flushes
// on demand.
func mountFaulty(t *testing.T) (dir string, p *core.FS, f *pmem.Faulty) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE: %v", err)
	}
	m := pmemtest.NewMemory(t, 64<<20) // checked once the cleanup below closed the pool
	if err := core.Format(m, 0, 0); err != nil {
		t.Fatal(err)
	}
	f = pmem.NewFaulty(m)
	p, _, err := core.Open(f, core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	server, err := Mount(dir, Root(p, Options{}), p, MountOptions("faulty-pool", false, zap.NewNop()), nil)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := server.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		f.Heal()
		p.Close()
	})
	return dir, p, f
}

// failData makes every flush of the pool's data region fail (the journal
// and inode table keep working).
func failData(p *core.FS, f *pmem.Faulty) {
	start := int64(p.Superblock().DataStart.Off())
	f.FailFlushRange(start, p.Medium().Size()-start, errInjected)
}

// fsync(2), fdatasync(2) and msync(2) of a shared mapping all fail with EIO
// once the data they cover failed to persist, and keep failing until the
// bytes are written again.
func TestFsyncEIOThroughFUSE(t *testing.T) {
	dir, p, f := mountFaulty(t)
	file, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if _, err := file.Write(bytes.Repeat([]byte{1}, 4*4096)); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); err != nil {
		t.Fatalf("fsync before any fault: %v", err)
	}

	if _, err := file.WriteAt([]byte("overwrite"), 100); err != nil {
		t.Fatal(err)
	}
	failData(p, f)
	if err := file.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync after a failed flush: %v, want EIO", err)
	}
	if err := unix.Fdatasync(int(file.Fd())); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fdatasync after it: %v, want EIO", err)
	}
	f.Heal()
	if err := file.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync once the medium works, bytes not rewritten: %v, want EIO", err)
	}
	if _, err := file.WriteAt(bytes.Repeat([]byte{2}, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); err != nil {
		t.Fatalf("fsync after rewriting: %v", err)
	}

	// A shared mapping: msync writes the page back (a FUSE write) and
	// then fsyncs.
	mem, err := unix.Mmap(int(file.Fd()), 0, 4*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	defer unix.Munmap(mem)
	// Stores into the mapping fault in through a syscall first: a page
	// fault in this process waits for this process's own daemon
	// uninterruptibly, and a garbage collection starting meanwhile could
	// not stop the faulting thread (a deadlock; see TestReadAhead). In a
	// syscall the runtime does not wait for it.
	store := func(i int, c byte) {
		t.Helper()
		if err := unix.Madvise(mem[i&^4095:i&^4095+4096], unix.MADV_POPULATE_WRITE); err != nil {
			t.Fatalf("madvise(MADV_POPULATE_WRITE): %v", err)
		}
		mem[i] = c
	}
	store(2*4096+7, 'm')
	failData(p, f)
	if err := unix.Msync(mem, unix.MS_SYNC); !errors.Is(err, syscall.EIO) {
		t.Fatalf("msync after a failed flush: %v, want EIO", err)
	}
	f.Heal()
	if err := unix.Msync(mem, unix.MS_SYNC); !errors.Is(err, syscall.EIO) {
		t.Fatalf("msync again, page not rewritten: %v, want EIO", err)
	}
	store(2*4096+8, 'n')
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		t.Fatalf("msync after rewriting the page: %v", err)
	}
	if err := file.Sync(); err != nil {
		t.Fatalf("fsync after the msync: %v", err)
	}
}
