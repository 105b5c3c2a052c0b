package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// bothErrno runs op on dnnfs and on tmpfs and fails t unless both give
// want (0 = success).
func bothErrno(t *testing.T, what string, dnnfs, tmpfs string, want unix.Errno, op func(root string) error) {
	t.Helper()
	for _, r := range []struct{ name, root string }{{"tmpfs", tmpfs}, {"dnnfs", dnnfs}} {
		if got := errnoOf(op(r.root)); got != want {
			t.Errorf("%s on %s: %s, want %s", what, r.name, errnoName(got), errnoName(want))
		}
	}
}

// TestXattrLimits: the kernel's xattr limits hold on dnnfs exactly as on
// tmpfs: values up to XATTR_SIZE_MAX (65536) bytes, E2BIG past it; names up
// to XATTR_NAME_MAX (255) bytes, ERANGE past it; ERANGE for a getxattr or
// listxattr buffer that is too small, and size queries with none. The
// 65536-byte value survives a remount.
func TestXattrLimits(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64m")
	ref := tmpfsDir(t)
	mnt := fs.Path()
	for _, root := range []string{mnt, ref} {
		writeFile(t, filepath.Join(root, "f"), []byte("data"), 0o644)
	}
	max := randBytes(7, 65536)
	bothErrno(t, "setxattr of a 65536-byte value", mnt, ref, 0, func(r string) error {
		return retry(func() error { return unix.Setxattr(filepath.Join(r, "f"), "user.max", max, 0) })
	})
	bothErrno(t, "setxattr of a 65537-byte value", mnt, ref, unix.E2BIG, func(r string) error {
		return retry(func() error { return unix.Setxattr(filepath.Join(r, "f"), "user.over", make([]byte, 65537), 0) })
	})
	name255 := "user." + strings.Repeat("n", 250)
	bothErrno(t, "setxattr with a 255-byte name", mnt, ref, 0, func(r string) error {
		return retry(func() error { return unix.Setxattr(filepath.Join(r, "f"), name255, []byte("v"), 0) })
	})
	bothErrno(t, "setxattr with a 256-byte name", mnt, ref, unix.ERANGE, func(r string) error {
		return retry(func() error { return unix.Setxattr(filepath.Join(r, "f"), name255+"n", []byte("v"), 0) })
	})
	bothErrno(t, "getxattr with a 256-byte name", mnt, ref, unix.ERANGE, func(r string) error {
		_, err := retryN(func() (int, error) { return unix.Getxattr(filepath.Join(r, "f"), name255+"n", nil) })
		return err
	})
	bothErrno(t, "getxattr into a 65535-byte buffer", mnt, ref, unix.ERANGE, func(r string) error {
		_, err := retryN(func() (int, error) { return unix.Getxattr(filepath.Join(r, "f"), "user.max", make([]byte, 65535)) })
		return err
	})
	bothErrno(t, "listxattr into a 1-byte buffer", mnt, ref, unix.ERANGE, func(r string) error {
		_, err := retryN(func() (int, error) { return unix.Listxattr(filepath.Join(r, "f"), make([]byte, 1)) })
		return err
	})
	for _, root := range []string{mnt, ref} {
		f := filepath.Join(root, "f")
		if n, err := retryN(func() (int, error) { return unix.Getxattr(f, "user.max", nil) }); err != nil || n != 65536 {
			t.Errorf("%s: size query of the 65536-byte value: %d, %v", root, n, err)
		}
		v, err := getXattr(f, "user.max")
		must(t, err)
		wantBytes(t, "65536-byte value", v, max)
		if v, err := getXattr(f, name255); err != nil || string(v) != "v" {
			t.Errorf("%s: 255-byte name reads %q, %v", root, v, err)
		}
		if got := listXattrs(t, f); fmt.Sprint(got) != fmt.Sprint([]string{"user.max", name255}) {
			t.Errorf("%s: listxattr %q", root, got)
		}
	}
	fs = fs.Remount(t)
	v, err := getXattr(fs.Path("f"), "user.max")
	must(t, err)
	wantBytes(t, "65536-byte value after remount", v, max)
}

// TestNameLimits: NAME_MAX and PATH_MAX as on tmpfs: 255-byte names work
// for every kind of entry and 256-byte ones fail with ENAMETOOLONG; a path
// of PATH_MAX bytes or more fails with ENAMETOOLONG while the same file is
// reachable relative to a directory descriptor; symlink targets up to 4095
// bytes.
func TestNameLimits(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64m")
	ref := tmpfsDir(t)
	mnt := fs.Path()
	n255, n256 := strings.Repeat("a", 255), strings.Repeat("b", 256)
	if a, b := statfs(t, mnt).Namelen, statfs(t, ref).Namelen; a != b {
		t.Errorf("statfs f_namelen: dnnfs %d, tmpfs %d", a, b)
	}
	for _, c := range []struct {
		what string
		want unix.Errno
		op   func(r string) error
	}{
		{"create 255", 0, func(r string) error { return os.WriteFile(filepath.Join(r, n255), []byte("x"), 0o644) }},
		{"create 256", unix.ENAMETOOLONG, func(r string) error { return os.WriteFile(filepath.Join(r, n256), nil, 0o644) }},
		{"mkdir 255", 0, func(r string) error { return os.Mkdir(filepath.Join(r, "d"+n255[1:]), 0o755) }},
		{"mkdir 256", unix.ENAMETOOLONG, func(r string) error { return os.Mkdir(filepath.Join(r, n256), 0o755) }},
		{"mkfifo 255", 0, func(r string) error { return unix.Mkfifo(filepath.Join(r, "p"+n255[1:]), 0o644) }},
		{"mkfifo 256", unix.ENAMETOOLONG, func(r string) error { return unix.Mkfifo(filepath.Join(r, n256), 0o644) }},
		{"symlink 255", 0, func(r string) error { return os.Symlink("t", filepath.Join(r, "s"+n255[1:])) }},
		{"symlink 256", unix.ENAMETOOLONG, func(r string) error { return os.Symlink("t", filepath.Join(r, n256)) }},
		{"link 255", 0, func(r string) error { return os.Link(filepath.Join(r, n255), filepath.Join(r, "l"+n255[1:])) }},
		{"link 256", unix.ENAMETOOLONG, func(r string) error { return os.Link(filepath.Join(r, n255), filepath.Join(r, n256)) }},
		{"rename to 256", unix.ENAMETOOLONG, func(r string) error { return rename(filepath.Join(r, n255), filepath.Join(r, n256)) }},
		{"lookup 256", unix.ENAMETOOLONG, func(r string) error { _, err := os.Lstat(filepath.Join(r, n256)); return err }},
		{"symlink target 4095", 0, func(r string) error { return os.Symlink(strings.Repeat("t/", 2047)+"t", filepath.Join(r, "long")) }},
		{"symlink target 4096", unix.ENAMETOOLONG, func(r string) error { return os.Symlink(strings.Repeat("t/", 2048), filepath.Join(r, "longer")) }},
	} {
		bothErrno(t, c.what, mnt, ref, c.want, c.op)
	}
	for _, r := range []string{mnt, ref} {
		if got, err := os.Readlink(filepath.Join(r, "long")); err != nil || len(got) != 4095 {
			t.Errorf("%s: 4095-byte symlink target reads back %d bytes, %v", r, len(got), err)
		}
	}

	// A tree deeper than PATH_MAX, made and read relative to directory
	// descriptors.
	comp := strings.Repeat("c", 200)
	depth := 4096/len(comp) + 2
	for _, r := range []string{mnt, ref} {
		dfd, err := retryN(func() (int, error) { return unix.Open(r, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0) })
		must(t, err)
		for i := 0; i < depth; i++ {
			must(t, retry(func() error { return unix.Mkdirat(dfd, comp, 0o755) }))
			next, err := retryN(func() (int, error) { return unix.Openat(dfd, comp, unix.O_RDONLY|unix.O_DIRECTORY, 0) })
			must(t, err)
			unix.Close(dfd)
			dfd = next
		}
		fd, err := retryN(func() (int, error) { return unix.Openat(dfd, "leaf", unix.O_CREAT|unix.O_WRONLY, 0o644) })
		must(t, err)
		_, err = retryN(func() (int, error) { return unix.Write(fd, []byte("deep")) })
		must(t, err)
		unix.Close(fd)
		unix.Close(dfd)
	}
	bothErrno(t, "open of a path longer than PATH_MAX", mnt, ref, unix.ENAMETOOLONG, func(r string) error {
		p := r + strings.Repeat("/"+comp, depth) + "/leaf"
		_, err := os.ReadFile(p)
		return err
	})
	fs.Remount(t)
	dfd, err := retryN(func() (int, error) { return unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0) })
	must(t, err)
	defer func() { unix.Close(dfd) }()
	for i := 0; i < depth; i++ {
		next, err := retryN(func() (int, error) { return unix.Openat(dfd, comp, unix.O_RDONLY|unix.O_DIRECTORY, 0) })
		must(t, err)
		unix.Close(dfd)
		dfd = next
	}
	fd, err := retryN(func() (int, error) { return unix.Openat(dfd, "leaf", unix.O_RDONLY, 0) })
	must(t, err)
	b := make([]byte, 10)
	n, _ := retryN(func() (int, error) { return unix.Read(fd, b) })
	unix.Close(fd)
	if string(b[:n]) != "deep" {
		t.Errorf("deep leaf after remount reads %q", b[:n])
	}
}

// TestTmpfile: open(2) with O_TMPFILE makes a nameless file as on tmpfs;
// linkat(2) through /proc/self/fd (or AT_EMPTY_PATH) publishes it with the
// bytes written before; O_EXCL makes it unlinkable (ENOENT); an unlinked
// tmpfile's blocks are freed on close; one open when the daemon dies is
// freed by the next mount, with fsck clean.
func TestTmpfile(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64m")
	ref := tmpfsDir(t)
	mnt := fs.Path()
	data := randBytes(11, 300000)
	for _, r := range []string{ref, mnt} {
		fd, err := retryN(func() (int, error) { return unix.Open(r, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o640) })
		if err != nil {
			t.Fatalf("O_TMPFILE in %s: %v", r, err)
		}
		pwriteFull(t, fd, data, 0)
		st := fstat(t, fd)
		if st.Nlink != 0 || st.Mode != unix.S_IFREG|0o640 || st.Size != int64(len(data)) {
			t.Errorf("%s: tmpfile nlink %d mode %#o size %d", r, st.Nlink, st.Mode, st.Size)
		}
		if ents, err := os.ReadDir(r); err != nil || len(ents) != 0 {
			t.Errorf("%s: a tmpfile shows in the directory: %v, %v", r, ents, err)
		}
		must(t, retry(func() error {
			return unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, filepath.Join(r, "published"), unix.AT_SYMLINK_FOLLOW)
		}))
		if st := fstat(t, fd); st.Nlink != 1 {
			t.Errorf("%s: nlink %d after linkat", r, st.Nlink)
		}
		closeFd(t, fd)
		wantBytes(t, r+": published tmpfile", readFile(t, filepath.Join(r, "published")), data)

		// AT_EMPTY_PATH publishes too.
		fd, err = retryN(func() (int, error) { return unix.Open(r, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600) })
		must(t, err)
		pwriteFull(t, fd, []byte("second"), 0)
		must(t, retry(func() error {
			return unix.Linkat(fd, "", unix.AT_FDCWD, filepath.Join(r, "second"), unix.AT_EMPTY_PATH)
		}))
		closeFd(t, fd)
		wantBytes(t, r+": second tmpfile", readFile(t, filepath.Join(r, "second")), []byte("second"))

		// O_EXCL: never linkable (the kernel refuses).
		fd, err = retryN(func() (int, error) { return unix.Open(r, unix.O_TMPFILE|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o600) })
		must(t, err)
		err = retry(func() error {
			return unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, filepath.Join(r, "excl"), unix.AT_SYMLINK_FOLLOW)
		})
		wantErrno(t, r+": linkat of an O_EXCL tmpfile", err, unix.ENOENT)
		closeFd(t, fd)
	}

	// An unlinked tmpfile's blocks are freed with its last descriptor.
	free := statfs(t, mnt).Bfree
	fd, err := retryN(func() (int, error) { return unix.Open(mnt, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600) })
	must(t, err)
	pwriteFull(t, fd, make([]byte, 4<<20), 0)
	if statfs(t, mnt).Bfree >= free {
		t.Errorf("4 MiB written to a tmpfile used no blocks")
	}
	closeFd(t, fd)
	if !eventually(func() bool { return statfs(t, mnt).Bfree == free }) {
		t.Errorf("free blocks %d after closing the tmpfile, %d before it", statfs(t, mnt).Bfree, free)
	}

	// Crash with a tmpfile open: the next mount frees it.
	fd, err = retryN(func() (int, error) { return unix.Open(mnt, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600) })
	must(t, err)
	pwriteFull(t, fd, make([]byte, 4<<20), 0)
	fs.Kill(t)
	unix.Close(fd)
	fs = fs.Remount(t)
	if got := statfs(t, mnt).Bfree; got != free {
		t.Errorf("free blocks %d after a crash with an open tmpfile, %d before it", got, free)
	}
	wantBytes(t, "published tmpfile after the crash", readFile(t, fs.Path("published")), data)
}
