package core

import (
	"errors"
	"testing"

	"github.com/dnnfs/dnnfs/format"
)

func mustCreate(t *testing.T, fs *FS, name string, data []byte) *Inode {
	t.Helper()
	in, err := fs.Create(fs.Root(), name, NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(in, 0, data, false); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestKernelRefKeepsUnlinkedInode: an unlinked inode the kernel still
// references keeps its number and data until KernelForget.
func TestKernelRefKeepsUnlinkedInode(t *testing.T) {
	fs, _ := openTestPool(t)
	defer fs.Close()
	data := []byte("the original bytes")
	in := mustCreate(t, fs, "f", data)
	fs.KernelRef(in)
	if err := fs.Unlink(fs.Root(), "f"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if n := mustCreate(t, fs, string(rune('a'+i%26))+string(rune('a'+i/26)), []byte("new")); n.Ino == in.Ino {
			t.Fatalf("inode %d reused while the kernel references it", in.Ino)
		}
	}
	got := make([]byte, len(data))
	if _, err := fs.ReadAt(in, got, 0); err != nil || string(got) != string(data) {
		t.Fatalf("unlinked inode reads %q, %v; want %q", got, err, data)
	}
	if fs.Inode(in.Ino) != in {
		t.Fatal("unlinked, referenced inode left the inode table")
	}
	if err := fs.KernelForget(in); err != nil {
		t.Fatal(err)
	}
	if fs.Inode(in.Ino) != nil {
		t.Fatal("inode still live after the kernel's last reference went")
	}
}

// TestRetryNoSpace: an allocation failing while an unlinked inode waits
// for the kernel's FORGET is retried once the inode is freed.
func TestRetryNoSpace(t *testing.T) {
	fs, _ := openTestPool(t)
	defer fs.Close()
	big := make([]byte, fs.Statfs().Free*format.BlockSize*3/4)
	in := mustCreate(t, fs, "old", big)
	fs.KernelRef(in)
	if err := fs.Unlink(fs.Root(), "old"); err != nil {
		t.Fatal(err)
	}
	nw, err := fs.Create(fs.Root(), "new", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	err = fs.RetryNoSpace(func() error {
		calls++
		_, err := fs.Write(nw, 0, big, false)
		if calls == 1 {
			if !errors.Is(err, ErrNoSpace) {
				t.Errorf("first write: %v, want ErrNoSpace while the old file is kept", err)
			}
			go fs.KernelForget(in) // the kernel's FORGET arrives
		}
		return err
	})
	if err != nil || calls < 2 {
		t.Fatalf("RetryNoSpace: %v after %d calls; want success on a retry", err, calls)
	}
	// With no orphan pending, ENOSPC is returned at once.
	calls = 0
	if err := fs.RetryNoSpace(func() error { calls++; return ErrNoSpace }); !errors.Is(err, ErrNoSpace) || calls != 1 {
		t.Fatalf("RetryNoSpace without orphans: %v after %d calls, want ErrNoSpace after 1", err, calls)
	}
}
