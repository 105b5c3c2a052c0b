package core

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
	"github.com/dnnfs/dnnfs/pmem"
)

// openTestPool opens a pool on a fresh in-memory medium (openTestPoolWith's
// defaults).
func openTestPool(t *testing.T) (*FS, pmem.Medium) {
	t.Helper()
	return openTestPoolWith(t, 32<<20, Options{})
}

// openTestPoolWith formats a checked medium of size bytes (pmemtest: at
// cleanup recovery.Check fails the test for any problem) and opens the
// pool on it, closed at cleanup before the check. A test that reopens the
// medium closes what it opened itself; a second Close is harmless.
func openTestPoolWith(t testing.TB, size int64, opts Options) (*FS, pmem.Medium) {
	t.Helper()
	m := pmemtest.NewMemory(t, size)
	return openCheckedPool(t, m, opts), m
}

// openImage opens the pool on a crash image (a Recorder over img),
// closed and checked at cleanup.
func openImage(t testing.TB, img []byte, opts Options) (*FS, *MountReport, error) {
	t.Helper()
	m := pmem.NewRecorder(img)
	pmemtest.Check(t, m)
	fs, rep, err := Open(m, opts)
	if err == nil {
		t.Cleanup(func() { _ = fs.Close() })
	}
	return fs, rep, err
}

// openCheckedPool formats m and opens the pool on it, closed at cleanup.
// The caller registers m for checking (pmemtest.Check) first.
func openCheckedPool(t testing.TB, m pmem.Medium, opts Options) *FS {
	t.Helper()
	if err := Format(m, 0, 0); err != nil {
		t.Fatal(err)
	}
	fs, _, err := Open(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fs.Close(); err != nil {
			t.Errorf("closing the test pool: %v", err)
		}
	})
	return fs
}

func TestSpecialInodes(t *testing.T) {
	fs, m := openTestPool(t)
	root := fs.Root()
	fifo, err := fs.Create(root, "fifo", NewInode{Mode: format.ModeFifo | 0o640, Rdev: 99})
	if err != nil {
		t.Fatal(err)
	}
	chr, err := fs.Create(root, "null", NewInode{Mode: format.ModeChr | 0o666, Rdev: 1<<8 | 3})
	if err != nil {
		t.Fatal(err)
	}
	if a := fifo.Attr(); a.Rdev != 0 || a.Mode != format.ModeFifo|0o640 || a.Nlink != 1 {
		t.Errorf("fifo attr %+v: a FIFO has no device number", a)
	}
	if a := chr.Attr(); a.Rdev != 1<<8|3 {
		t.Errorf("device rdev %#x", a.Rdev)
	}
	if err := fs.Truncate(fifo, 10); !errors.Is(err, ErrInvalid) {
		t.Errorf("truncate of a FIFO: %v", err)
	}
	if err := fs.StartSession(chr, 1, 4096, format.SessionWrite); !errors.Is(err, ErrInvalid) {
		t.Errorf("session on a device: %v", err)
	}
	if e, ok := fs.ReadDir(root, 0); !ok || e.Mode != format.ModeFifo {
		t.Errorf("readdir: %+v", e)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	fs, _, err = Open(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	in, err := fs.Lookup(fs.Root(), "null")
	if err != nil || in.Attr().Rdev != 1<<8|3 || in.Attr().Mode != format.ModeChr|0o666 {
		t.Fatalf("device after remount: %v", err)
	}
}

func TestTmpfileLifetime(t *testing.T) {
	fs, m := openTestPool(t)
	root := fs.Root()
	free := fs.Statfs().Free
	tmp, err := fs.CreateTmpfile(root, NewInode{Mode: format.ModeReg | 0o600})
	if err != nil {
		t.Fatal(err)
	}
	fs.Opened(tmp)
	if _, err := fs.Write(tmp, 0, bytes.Repeat([]byte{1}, 100000), false); err != nil {
		t.Fatal(err)
	}
	if a := tmp.Attr(); a.Nlink != 0 {
		t.Errorf("tmpfile nlink %d", a.Nlink)
	}
	if _, ok := fs.ReadDir(root, 0); ok {
		t.Error("a tmpfile is in the directory")
	}
	// A crash now leaves an orphan that the next mount frees.
	crashed := pmemtest.NewMemory(t, m.Size())
	copy(crashed.Bytes(), m.Bytes())
	if err := fs.Released(tmp); err != nil {
		t.Fatal(err)
	}
	if fs.Inode(tmp.Ino) != nil || fs.Statfs().Free != free {
		t.Errorf("closed tmpfile not freed: %d free blocks, %d before", fs.Statfs().Free, free)
	}
	// Unlinked-while-open files are not linkable; only a tmpfile is, once.
	f, err := fs.Create(root, "f", NewInode{Mode: format.ModeReg | 0o600})
	if err != nil {
		t.Fatal(err)
	}
	fs.Opened(f)
	if err := fs.Unlink(root, "f"); err != nil {
		t.Fatal(err)
	}
	if err := fs.Link(f, root, "again"); !errors.Is(err, ErrNotFound) {
		t.Errorf("link of an unlinked open file: %v", err)
	}
	if err := fs.Released(f); err != nil {
		t.Fatal(err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	fs2, rep, err := Open(crashed, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs2.Close()
	if rep.OrphansFreed != 1 || fs2.Statfs().Free != free {
		t.Errorf("after a crash with a tmpfile open: %d orphans freed, %d free blocks (want 1, %d)", rep.OrphansFreed, fs2.Statfs().Free, free)
	}
}

func TestXattrSizeLimits(t *testing.T) {
	fs, _ := openTestPool(t)
	defer fs.Close()
	in, err := fs.Create(fs.Root(), "f", NewInode{Mode: format.ModeReg | 0o600})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Setxattr(in, "user.max", make([]byte, 65536), 0); err != nil {
		t.Errorf("65536-byte value: %v", err)
	}
	if err := fs.Setxattr(in, "user.over", make([]byte, 65537), 0); !errors.Is(err, ErrValueTooBig) {
		t.Errorf("65537-byte value: %v", err)
	}
	if err := fs.Setxattr(in, strings.Repeat("n", 256), nil, 0); !errors.Is(err, ErrRange) {
		t.Errorf("256-byte name: %v", err)
	}
	// Names whose list would pass XATTR_LIST_MAX (65536 bytes) are refused.
	g, err := fs.Create(fs.Root(), "g", NewInode{Mode: format.ModeReg | 0o600})
	if err != nil {
		t.Fatal(err)
	}
	long := "user." + strings.Repeat("x", 247) // 252 bytes + 3 of the number + NUL = 256 in the list
	i := 0
	for ; i < 300; i++ {
		if err = fs.Setxattr(g, fmt.Sprintf("%s%03d", long, i), nil, 0); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrNoSpace) || i != 65536/256 {
		t.Errorf("name %d: %v; want ErrNoSpace at name %d", i, err, 65536/256)
	}
}
