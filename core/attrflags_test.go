package core

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
)

// TestFileFlagsEnforced: immutable and append-only refuse what the VFS
// refuses on a local file system; the flags and the ctime they set
// survive a remount.
func TestFileFlagsEnforced(t *testing.T) {
	fs, m := openTestPool(t)
	root := fs.Root()
	f := mustCreate(t, fs, "f", []byte("0123456789"))
	d, err := fs.Create(root, "d", NewInode{Mode: format.ModeDir | 0o755})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create(d, "x", NewInode{Mode: format.ModeReg | 0o644}); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetFileFlags(Caller{}, f, 1<<30); !errors.Is(err, ErrNotSupp) {
		t.Errorf("an attribute dnnfs does not keep: %v, want ErrNotSupp", err)
	}
	before := f.Attr().Ctime
	time.Sleep(time.Millisecond)
	if err := fs.SetFileFlags(Caller{}, f, format.InodeImmutable); err != nil {
		t.Fatal(err)
	}
	if !f.Attr().Ctime.After(before) {
		t.Error("setting a file attribute left the ctime alone")
	}
	mode := uint32(0o600)
	now := time.Now()
	wantErr := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) || !errors.Is(err, ErrPerm) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	_, err = fs.Write(f, 0, []byte("x"), false)
	wantErr("write to an immutable file", err, ErrImmutable)
	wantErr("open an immutable file for writing", fs.CheckOpen(f, true, false, false), ErrImmutable)
	wantErr("truncate an immutable file", fs.Truncate(f, 0), ErrImmutable)
	wantErr("fallocate an immutable file", fs.Fallocate(f, 0, 4096, 0), ErrImmutable)
	wantErr("chmod an immutable file", fs.Setattr(f, SetAttr{Mode: &mode}), ErrImmutable)
	wantErr("touch an immutable file", fs.Setattr(f, SetAttr{Mtime: &now, TimesNow: true}), ErrImmutable)
	wantErr("setxattr on an immutable file", fs.Setxattr(f, "user.a", []byte("v"), 0), ErrImmutable)
	wantErr("link an immutable file", fs.Link(f, root, "g"), ErrImmutable)
	wantErr("unlink an immutable file", fs.Unlink(root, "f"), ErrImmutable)
	wantErr("rename an immutable file", fs.Rename(root, "f", root, "g", 0), ErrImmutable)
	if err := fs.CheckOpen(f, false, false, false); err != nil {
		t.Errorf("open an immutable file for reading: %v", err)
	}
	if got, err := fs.ReadAt(f, make([]byte, 10), 0); err != nil || got != 10 {
		t.Errorf("read an immutable file: %d, %v", got, err)
	}

	if err := fs.SetFileFlags(Caller{}, f, format.InodeAppend|format.InodeNoDump); err != nil {
		t.Fatal(err)
	}
	_, err = fs.Write(f, 0, []byte("x"), false)
	wantErr("overwrite an append-only file", err, ErrAppendOnly)
	wantErr("open an append-only file without O_APPEND", fs.CheckOpen(f, true, false, false), ErrAppendOnly)
	wantErr("open an append-only file with O_TRUNC", fs.CheckOpen(f, true, true, true), ErrAppendOnly)
	wantErr("truncate an append-only file", fs.Truncate(f, 20), ErrAppendOnly)
	wantErr("chmod an append-only file", fs.Setattr(f, SetAttr{Mode: &mode}), ErrAppendOnly)
	wantErr("set an append-only file's times", fs.Setattr(f, SetAttr{Mtime: &now}), ErrAppendOnly)
	wantErr("unlink an append-only file", fs.Unlink(root, "f"), ErrAppendOnly)
	wantErr("punch an append-only file", fs.Fallocate(f, 0, 4096, FallocPunchHole|FallocKeepSize), ErrAppendOnly)
	if err := fs.CheckOpen(f, true, true, false); err != nil {
		t.Errorf("open an append-only file with O_APPEND: %v", err)
	}
	if _, err := fs.Write(f, 10, []byte("ab"), true); err != nil {
		t.Errorf("append to an append-only file: %v", err)
	}
	if err := fs.Setattr(f, SetAttr{Mtime: &now, TimesNow: true}); err != nil {
		t.Errorf("touch an append-only file: %v", err)
	}

	// Directories: immutable keeps its entries, append-only lets new ones in.
	if err := fs.SetFileFlags(Caller{}, d, format.InodeImmutable); err != nil {
		t.Fatal(err)
	}
	_, err = fs.Create(d, "y", NewInode{Mode: format.ModeReg | 0o644})
	wantErr("create in an immutable directory", err, ErrImmutable)
	wantErr("unlink from an immutable directory", fs.Unlink(d, "x"), ErrImmutable)
	mustCreate(t, fs, "z", nil)
	wantErr("rename into an immutable directory", fs.Rename(root, "z", d, "z", 0), ErrImmutable)
	wantErr("rmdir of a non-empty immutable directory", fs.Rmdir(root, "d"), ErrImmutable)
	if err := fs.SetFileFlags(Caller{}, d, format.InodeAppend); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create(d, "y", NewInode{Mode: format.ModeReg | 0o644}); err != nil {
		t.Errorf("create in an append-only directory: %v", err)
	}
	wantErr("unlink from an append-only directory", fs.Unlink(d, "x"), ErrAppendOnly)

	ctime := f.Attr().Ctime
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	fs, _, err = Open(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	f, _ = fs.Lookup(fs.Root(), "f")
	d, _ = fs.Lookup(fs.Root(), "d")
	if got := fs.FileFlags(f); got != format.InodeAppend|format.InodeNoDump {
		t.Errorf("file attributes after remount %#x", got)
	}
	if got := fs.FileFlags(d); got != format.InodeAppend {
		t.Errorf("directory attributes after remount %#x", got)
	}
	if got := f.Attr().Ctime; !got.Equal(ctime) {
		t.Errorf("ctime after remount %v, want %v", got, ctime)
	}
	for _, in := range []*Inode{f, d} {
		if err := fs.SetFileFlags(Caller{}, in, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Unlink(fs.Root(), "f"); err != nil {
		t.Errorf("unlink once the attributes are cleared: %v", err)
	}
}

// TestSetFileFlagsNeedsCapability: only a caller with CAP_LINUX_IMMUTABLE
// sets or clears immutable and append-only; the others anyone may.
func TestSetFileFlagsNeedsCapability(t *testing.T) {
	if syscall.Geteuid() != 0 {
		t.Skip("needs root to start a process without capabilities")
	}
	fs, _ := openTestPool(t)
	defer fs.Close()
	f := mustCreate(t, fs, "f", nil)
	nobody := Caller{TID: startNobody(t), UID: 65534, GID: 65534}
	if err := fs.SetFileFlags(nobody, f, format.InodeImmutable); !errors.Is(err, ErrFlagPerm) {
		t.Errorf("immutable set without CAP_LINUX_IMMUTABLE: %v, want ErrFlagPerm", err)
	}
	if err := fs.SetFileFlags(nobody, f, format.InodeNoDump|format.InodeNoAtime); err != nil {
		t.Errorf("nodump and noatime without CAP_LINUX_IMMUTABLE: %v", err)
	}
	if err := fs.SetFileFlags(Caller{}, f, format.InodeAppend); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetFileFlags(nobody, f, 0); !errors.Is(err, ErrFlagPerm) {
		t.Errorf("append-only cleared without CAP_LINUX_IMMUTABLE: %v, want ErrFlagPerm", err)
	}
}

// TestNoAtimeFlag: a file with the no-atime attribute keeps its access
// time on reads, even under strictatime.
func TestNoAtimeFlag(t *testing.T) {
	fs, _ := openTestPoolWith(t, 32<<20, Options{Atime: AtimeStrict})
	defer fs.Close()
	f := mustCreate(t, fs, "f", []byte("data"))
	old := time.Unix(1000, 0)
	if err := fs.Setattr(f, SetAttr{Atime: &old}); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetFileFlags(Caller{}, f, format.InodeNoAtime); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.ReadAt(f, make([]byte, 4), 0); err != nil {
		t.Fatal(err)
	}
	if got := f.Attr().Atime; !got.Equal(old) {
		t.Errorf("a read of a no-atime file set its atime to %v", got)
	}
	if err := fs.SetFileFlags(Caller{}, f, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.ReadAt(f, make([]byte, 4), 0); err != nil {
		t.Fatal(err)
	}
	if got := f.Attr().Atime; got.Equal(old) {
		t.Error("a read left the atime alone once the attribute was cleared")
	}
}

// TestRenameWhiteout: RENAME_WHITEOUT leaves a 0:0 character device of
// mode 0 owned by the caller at the source name, in the rename's own
// transaction: a crash right after it shows both names.
func TestRenameWhiteout(t *testing.T) {
	fs, m := openTestPool(t)
	root := fs.Root()
	mover := mustCreate(t, fs, "a", []byte("moved"))
	if err := fs.RenameAs(Caller{}, root, "a", root, "b", RenameExchange|RenameWhiteout); !errors.Is(err, ErrInvalid) {
		t.Errorf("whiteout with exchange: %v, want ErrInvalid", err)
	}
	if err := fs.RenameAs(Caller{UID: 1234, GID: 5678}, root, "a", root, "b", RenameWhiteout|RenameNoReplace); err != nil {
		t.Fatal(err)
	}
	check := func(fs *FS, when string) {
		t.Helper()
		wo, err := fs.Lookup(fs.Root(), "a")
		if err != nil {
			t.Fatalf("%s: the whiteout: %v", when, err)
		}
		if a := wo.Attr(); a.Mode != format.ModeChr || a.Rdev != 0 || a.UID != 1234 || a.GID != 5678 || a.Nlink != 1 {
			t.Errorf("%s: whiteout %+v, want a 0:0 character device, mode 0, owned by 1234:5678", when, a)
		}
		b, err := fs.Lookup(fs.Root(), "b")
		if err != nil || b.Ino != mover.Ino {
			t.Errorf("%s: the renamed file: %v", when, err)
		}
	}
	check(fs, "after the rename")
	crashed := pmemtest.NewMemory(t, m.Size())
	copy(crashed.Bytes(), m.Bytes())
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	fs2, _, err := Open(crashed, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs2.Close()
	check(fs2, "after a crash")
}

// startNobody starts a process as uid and gid 65534, with no
// capabilities, for the test's lifetime, and returns its pid.
func startNobody(t *testing.T) uint32 {
	t.Helper()
	if syscall.Geteuid() != 0 {
		t.Skip("needs root to start a process as nobody")
	}
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := cmd.Start(); err != nil {
		t.Skipf("start a process as nobody: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return uint32(cmd.Process.Pid)
}

// TestCallerWithoutIDs: a request without ids (NoID, as the kernel sends
// most requests once ID-mapped mounts are allowed) takes the thread's
// fsuid and fsgid from /proc where they matter.
func TestCallerWithoutIDs(t *testing.T) {
	c := Caller{TID: startNobody(t), UID: NoID, GID: NoID}
	if uid, gid := c.fsIDs(); uid != 65534 || gid != 65534 {
		t.Errorf("fsIDs %d:%d, want 65534:65534", uid, gid)
	}
	if cr := c.cred(); !cr.inGroup(65534) || cr.inGroup(NoID) || cr.fsetid {
		t.Errorf("cred %+v: want the thread's fsgid 65534 and no CAP_FSETID", cr)
	}
	if uid, gid := (Caller{UID: 7, GID: 8}).fsIDs(); uid != 7 || gid != 8 {
		t.Errorf("ids from the request: %d:%d, want 7:8", uid, gid)
	}
}
