package fs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIDMappedMount: an ID-mapped mount of a dnnfs mount (mount_setattr
// with MOUNT_ATTR_IDMAP, as xfstests' mount-idmapped makes) shows
// ownership through the mapping, and a file made or chowned through it
// gets the mapped owner in the pool: the kernel maps, the daemon stores
// what the request says.
func TestIDMappedMount(t *testing.T) {
	mnt, _ := mountPoolFS(t, false)
	if err := os.WriteFile(filepath.Join(mnt, "a"), []byte("by root"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(mnt, 0o777); err != nil {
		t.Fatal(err)
	}
	// A user namespace mapping ids 0-9999 to 10000-19999: through the
	// ID-mapped mount, pool id N shows as 10000+N.
	ns := exec.Command("sleep", "60")
	ns.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 10000, Size: 10000}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 10000, Size: 10000}}}
	if err := ns.Start(); err != nil {
		t.Skipf("a user namespace: %v", err)
	}
	defer func() { _ = ns.Process.Kill(); _ = ns.Wait() }()
	nsfd, err := unix.Open("/proc/"+strconv.Itoa(ns.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nsfd)
	tree, err := unix.OpenTree(unix.AT_FDCWD, mnt, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if errors.Is(err, unix.ENOSYS) {
		t.Skip("no open_tree(2)")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tree) // the detached mount goes with it
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(nsfd)}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		t.Fatalf("mount_setattr(MOUNT_ATTR_IDMAP) on a dnnfs mount: %v", err)
	}
	owner := func(dirfd int, name string) (uint32, uint32) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatalf("stat %s: %v", name, err)
		}
		return st.Uid, st.Gid
	}
	if u, g := owner(tree, "a"); u != 10000 || g != 10000 {
		t.Errorf("a root-owned file through the mapping: %d:%d, want 10000:10000", u, g)
	}

	// Made by fsuid 10042/fsgid 10043 through the mapping: 42:43 in the pool.
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // setfsuid is per thread; the thread dies with the goroutine
		unix.Setfsgid(10043)
		unix.Setfsuid(10042)
		fd, err := unix.Openat(tree, "b", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
			err = unix.Mkdirat(tree, "d", 0o755)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("create through the ID-mapped mount as 10042: %v", err)
	}
	for _, name := range []string{"b", "d"} {
		if u, g := owner(unix.AT_FDCWD, filepath.Join(mnt, name)); u != 42 || g != 43 {
			t.Errorf("%s made as 10042:10043 through the mapping is %d:%d in the pool, want 42:43", name, u, g)
		}
		if u, g := owner(tree, name); u != 10042 || g != 10043 {
			t.Errorf("%s through the mapping: %d:%d, want 10042:10043", name, u, g)
		}
	}

	// chown through the mapping stores the pool's ids.
	if err := unix.Fchownat(tree, "a", 10005, 10006, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatalf("chown through the ID-mapped mount: %v", err)
	}
	if u, g := owner(unix.AT_FDCWD, filepath.Join(mnt, "a")); u != 5 || g != 6 {
		t.Errorf("chowned to 10005:10006 through the mapping: %d:%d in the pool, want 5:6", u, g)
	}
	// Plain requests (no ids with ALLOW_IDMAP) still work on the mount.
	if err := os.Rename(filepath.Join(mnt, "b"), filepath.Join(mnt, "c")); err != nil {
		t.Errorf("rename on the mount: %v", err)
	}
}
