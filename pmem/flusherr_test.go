package pmem

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// failingFile is an in-memory FUSE file whose writes fail while fail is
// set: a pool file whose write-back fails, under a real msync.
type failingFile struct {
	gofs.MemRegularFile
	rw     sync.Mutex // Read copies under it; Write changes Data under it
	fail   atomic.Bool
	failed atomic.Int64
}

func (f *failingFile) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if f.fail.Load() {
		f.failed.Add(1)
		return 0, syscall.EIO
	}
	f.rw.Lock()
	defer f.rw.Unlock()
	return f.MemRegularFile.Write(ctx, fh, data, off)
}

// Read returns a copy: go-fuse's MemRegularFile hands out its own bytes,
// which a concurrent Write (the kernel's write-back of another page) would
// change while the reply is still being sent.
func (f *failingFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.rw.Lock()
	defer f.rw.Unlock()
	end := min(off+int64(len(dest)), int64(len(f.Data)))
	if off >= end {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(append([]byte(nil), f.Data[off:end]...)), 0
}

func (f *failingFile) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

type failingRoot struct {
	gofs.Inode
	file *failingFile
}

func (r *failingRoot) OnAdd(ctx context.Context) {
	ch := r.NewPersistentInode(ctx, r.file, gofs.StableAttr{Mode: syscall.S_IFREG})
	r.AddChild("pool", ch, false)
}

// An emulated pool whose pool file's write-back fails: Flush and Persist
// return the msync error instead of swallowing it.
func TestFlushReturnsMsyncFailure(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE: %v", err)
	}
	file := &failingFile{MemRegularFile: gofs.MemRegularFile{Data: make([]byte, MinSize), Attr: fuse.Attr{Mode: 0o600}}}
	mnt := t.TempDir()
	server, err := gofs.Mount(mnt, &failingRoot{file: file}, &gofs.Options{MountOptions: fuse.MountOptions{DirectMount: true}})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	defer server.Unmount()

	m, err := Open(filepath.Join(mnt, "pool"))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			m.Close()
		}
	}()
	if m.Kind() != Emulated {
		t.Fatalf("kind %v, want emulated", m.Kind())
	}
	b := m.Bytes()
	b[0] = 1
	if err := m.Persist(0, 1); err != nil {
		t.Fatalf("persist while the file system works: %v", err)
	}
	file.fail.Store(true)
	b[8192] = 2
	if err := m.Flush(8192, 1); !errors.Is(err, syscall.EIO) {
		t.Fatalf("flush whose write-back fails: %v, want EIO (%d writes failed)", err, file.failed.Load())
	}
	b[3*4096] = 3
	if err := m.Persist(3*4096, 1); !errors.Is(err, syscall.EIO) {
		t.Fatalf("persist whose write-back fails: %v, want EIO", err)
	}
	if n := m.(WritebackErrors).WritebackErrors(); n != 2 {
		t.Fatalf("WritebackErrors %d, want 2", n)
	}
	file.fail.Store(false)
	closed = true
	if err := m.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("close after failed write-backs: %v, want the first failure", err)
	}
}
