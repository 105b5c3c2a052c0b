package fs

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestFileAttributesThroughMount: chattr's ioctls (FS_IOC_GETFLAGS,
// FS_IOC_SETFLAGS, and xfs_io's FS_IOC_FSGETXATTR/FSSETXATTR) reach the
// pool through FUSE_IOCTL, and the attributes are enforced on the
// operations the kernel leaves to a FUSE daemon.
func TestFileAttributesThroughMount(t *testing.T) {
	mnt, _ := mountPoolFS(t, false)
	path := filepath.Join(mnt, "f")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	setFlags := func(v int) error {
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, v)
	}
	getFlags := func() uint32 {
		t.Helper()
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		v, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
		if err != nil {
			t.Fatalf("FS_IOC_GETFLAGS: %v", err)
		}
		return v
	}
	wantErrno := func(what string, err error, want syscall.Errno) {
		t.Helper()
		if err != want {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	unwrap := func(err error) error {
		switch e := err.(type) {
		case *os.PathError:
			return e.Err
		case *os.LinkError:
			return e.Err
		}
		return err
	}
	if got := getFlags(); got != 0 {
		t.Errorf("a new file's attributes %#x", got)
	}
	const immutable, appendOnly, noDump, noAtime = 0x10, 0x20, 0x40, 0x80
	wantErrno("an attribute dnnfs does not keep (FS_COMPR_FL)", setFlags(0x4), unix.EOPNOTSUPP)
	if err := setFlags(immutable | noDump); err != nil {
		t.Fatalf("chattr +id: %v", err)
	}
	if got := getFlags(); got != immutable|noDump {
		t.Errorf("attributes %#x after chattr +id", got)
	}
	_, err := os.OpenFile(path, os.O_WRONLY, 0)
	wantErrno("open an immutable file for writing", unwrap(err), unix.EPERM)
	wantErrno("truncate an immutable file", unwrap(os.Truncate(path, 0)), unix.EPERM)
	wantErrno("chmod an immutable file", unwrap(os.Chmod(path, 0o600)), unix.EPERM)
	wantErrno("touch an immutable file", unix.Utimes(path, nil), unix.EPERM)
	wantErrno("link an immutable file", unwrap(os.Link(path, path+".link")), unix.EPERM)
	wantErrno("rename an immutable file", unwrap(os.Rename(path, path+".new")), unix.EPERM)
	wantErrno("unlink an immutable file", unwrap(os.Remove(path)), unix.EPERM)
	wantErrno("setxattr on an immutable file", unix.Setxattr(path, "user.a", []byte("v"), 0), unix.EPERM)
	if b, err := os.ReadFile(path); err != nil || string(b) != "0123456789" {
		t.Errorf("read an immutable file: %q, %v", b, err)
	}

	if err := setFlags(appendOnly); err != nil {
		t.Fatalf("chattr =a: %v", err)
	}
	_, err = os.OpenFile(path, os.O_WRONLY, 0)
	wantErrno("open an append-only file without O_APPEND", unwrap(err), unix.EPERM)
	_, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0)
	wantErrno("open an append-only file with O_TRUNC", unwrap(err), unix.EPERM)
	wantErrno("unlink an append-only file", unwrap(os.Remove(path)), unix.EPERM)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("open an append-only file with O_APPEND: %v", err)
	}
	if _, err := f.Write([]byte("ab")); err != nil {
		t.Errorf("append: %v", err)
	}
	f.Close()
	if b, _ := os.ReadFile(path); string(b) != "0123456789ab" {
		t.Errorf("after an append: %q", b)
	}

	// xfs_io's interface: FS_XFLAG_NOATIME (0x40) is FS_NOATIME_FL.
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fsx [fsxattrSize]byte
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlFsGetXattr, uintptr(unsafe.Pointer(&fsx[0]))); e != 0 {
		t.Errorf("FS_IOC_FSGETXATTR: %v", e)
	} else if xflags := binary.LittleEndian.Uint32(fsx[:]); xflags != 0x10 { // FS_XFLAG_APPEND
		t.Errorf("FS_IOC_FSGETXATTR: xflags %#x, want append (0x10)", xflags)
	}
	unix.Close(fd)
	if err := setFlags(noAtime); err != nil {
		t.Fatalf("chattr =A: %v", err)
	}
	if got := getFlags(); got != noAtime {
		t.Errorf("attributes %#x after chattr =A", got)
	}
	if err := setFlags(0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Errorf("unlink once the attributes are cleared: %v", err)
	}
}

// TestRenameWhiteoutThroughMount: renameat2(RENAME_WHITEOUT), as
// overlayfs uses on its upper layer, leaves a 0:0 character device.
func TestRenameWhiteoutThroughMount(t *testing.T) {
	mnt, _ := mountPoolFS(t, false)
	a, b := filepath.Join(mnt, "a"), filepath.Join(mnt, "b")
	if err := os.WriteFile(a, []byte("moved"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_WHITEOUT); err != nil {
		t.Fatalf("renameat2(RENAME_WHITEOUT): %v", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(a, &st); err != nil {
		t.Fatalf("the whiteout: %v", err)
	}
	if st.Mode != unix.S_IFCHR || st.Rdev != 0 || st.Uid != 0 {
		t.Errorf("whiteout mode %#o rdev %#x uid %d; want a 0:0 character device, mode 0, owned by root", st.Mode, st.Rdev, st.Uid)
	}
	if data, err := os.ReadFile(b); err != nil || string(data) != "moved" {
		t.Errorf("the renamed file: %q, %v", data, err)
	}
	// A whiteout can be replaced by a rename over it, as overlayfs does.
	time.Sleep(10 * time.Millisecond)
	if err := os.Rename(b, a); err != nil {
		t.Fatalf("rename over the whiteout: %v", err)
	}
}
