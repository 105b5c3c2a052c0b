package e2e_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// maxLFS is the kernel's MAX_LFS_FILESIZE, the largest file size on its
// local file systems (tmpfs, ext4, xfs) and on a FUSE mount.
const maxLFS = 1<<63 - 1

// bigFileSteps does the largest-file sequence on the file at path and
// returns what each step answered, to compare dnnfs with tmpfs. (A pwrite
// or pread whose end passes 2^63-1 is EINVAL from the VFS before any file
// system sees it, so no write through the kernel can cross the limit.)
func bigFileSteps(t *testing.T, path string) []string {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC, 0o644)
	must(t, err)
	defer unix.Close(fd)
	var out []string
	note := func(what string, n int64, err error) {
		out = append(out, fmt.Sprintf("%s: %d %s", what, n, errnoName(errnoOf(err))))
	}
	note("ftruncate 2^63-1", 0, retry(func() error { return unix.Ftruncate(fd, maxLFS) }))
	note("ftruncate 2^63-4096", 0, retry(func() error { return unix.Ftruncate(fd, maxLFS-4095) }))
	n, err := retryN(func() (int, error) { return unix.Pwrite(fd, []byte{0xa5}, maxLFS-1) })
	note("pwrite 1 byte at 2^63-2", int64(n), err)
	n, err = retryN(func() (int, error) { return unix.Pwrite(fd, []byte{1}, maxLFS) })
	note("pwrite at 2^63-1", int64(n), err)
	n, err = retryN(func() (int, error) { return unix.Pwrite(fd, []byte{0x5a, 0xa5}, maxLFS-2) })
	note("pwrite 2 bytes at 2^63-3", int64(n), err)
	note("fallocate of the last byte", 0, retry(func() error { return unix.Fallocate(fd, 0, maxLFS-1, 1) }))
	note("fallocate at 2^63-1", 0, retry(func() error { return unix.Fallocate(fd, 0, maxLFS, 1) }))
	note("fallocate past 2^63-1", 0, retry(func() error { return unix.Fallocate(fd, 0, maxLFS-1, 2) }))
	var st unix.Stat_t
	must(t, retry(func() error { return unix.Fstat(fd, &st) }))
	note("size", st.Size, nil)
	b := make([]byte, 2)
	n, err = retryN(func() (int, error) { return unix.Pread(fd, b, maxLFS-2) })
	note(fmt.Sprintf("pread 2 bytes at 2^63-3 (% x)", b), int64(n), err)
	return out
}

// TestMaxFileSize is xfstests generic/525 and more: a file may be as
// large as the kernel allows (MAX_LFS_FILESIZE, 2^63-1 bytes), on dnnfs
// as on tmpfs: a truncate to it, a write of its last byte, fallocate up to
// it and EFBIG past it; SEEK_DATA and SEEK_HOLE near the end; the byte a
// write put at 2^63-2 reads back after a remount, and a truncate back
// down frees its block (the cleanup fsck checks the pool).
func TestMaxFileSize(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64m")
	ref := tmpfsDir(t)
	want := bigFileSteps(t, filepath.Join(ref, "f"))
	got := bigFileSteps(t, fs.Path("f"))
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("dnnfs %q, tmpfs %q", g, w)
		}
	}
	t.Logf("tmpfs: %q", want)
	// SEEK_DATA/SEEK_HOLE by their definition (this kernel's tmpfs gets
	// some wrong this close to 2^63: SEEK_DATA 0 says ENXIO, SEEK_HOLE at
	// 2^63-4096 answers 2^63-4097).
	fd, err := unix.Open(fs.Path("f"), unix.O_RDONLY, 0)
	must(t, err)
	const lastBlk = maxLFS / 4096 * 4096
	for _, c := range []struct {
		off    int64
		whence int
		want   int64
		err    unix.Errno
	}{
		{0, unix.SEEK_DATA, lastBlk, 0}, {maxLFS - 2, unix.SEEK_DATA, maxLFS - 2, 0},
		{0, unix.SEEK_HOLE, 0, 0}, {lastBlk, unix.SEEK_HOLE, maxLFS, 0}, {maxLFS - 1, unix.SEEK_HOLE, maxLFS, 0},
		{maxLFS, unix.SEEK_DATA, 0, unix.ENXIO}, {maxLFS, unix.SEEK_HOLE, 0, unix.ENXIO},
	} {
		var o int64
		err := retry(func() (err error) { o, err = unix.Seek(fd, c.off, c.whence); return err })
		if e := errnoOf(err); e != c.err || (e == 0 && o != c.want) {
			t.Errorf("lseek(%d, whence %d) = %d, %v; want %d, %s", c.off, c.whence, o, err, c.want, errnoName(c.err))
		}
	}
	unix.Close(fd)

	// generic/525 itself: truncate a new file to 2^63-1, write one byte
	// at 2^63-2 into another new one, cycle the mount, read it.
	big := fs.Path("file0")
	fd, err = unix.Open(big, unix.O_RDWR|unix.O_CREAT, 0o644)
	must(t, err)
	must(t, retry(func() error { return unix.Ftruncate(fd, maxLFS) }))
	unix.Close(fd)
	fd, err = unix.Open(fs.Path("file1"), unix.O_RDWR|unix.O_CREAT, 0o644)
	must(t, err)
	if n, err := retryN(func() (int, error) { return unix.Pwrite(fd, []byte{0x61}, maxLFS-1) }); n != 1 || err != nil {
		t.Errorf("pwrite of 0x61 at 2^63-2: %d, %v", n, err)
	}
	unix.Close(fd)

	fs = fs.Remount(t)
	if st := lstat(t, big); st.Size != maxLFS || st.Blocks != 0 {
		t.Errorf("file0 after a remount: size %d, %d blocks; want 2^63-1 and 0", st.Size, st.Blocks)
	}
	fd, err = unix.Open(fs.Path("file1"), unix.O_RDONLY, 0)
	must(t, err)
	b := make([]byte, 1)
	if n, err := retryN(func() (int, error) { return unix.Pread(fd, b, maxLFS-1) }); n != 1 || err != nil || b[0] != 0x61 {
		t.Errorf("file1: pread at 2^63-2 after a remount: %d, %v, %#x; want 0x61", n, err, b[0])
	}
	var st unix.Stat_t
	must(t, retry(func() error { return unix.Fstat(fd, &st) }))
	if st.Size != maxLFS || st.Blocks != 8 {
		t.Errorf("file1 after a remount: size %d, %d 512-byte blocks; want 2^63-1 and 8 (one block)", st.Size, st.Blocks)
	}
	unix.Close(fd)
	fd, err = unix.Open(fs.Path("f"), unix.O_RDONLY, 0)
	must(t, err)
	b = make([]byte, 2)
	if n, err := retryN(func() (int, error) { return unix.Pread(fd, b, maxLFS-2) }); n != 2 || err != nil || b[0] != 0x5a || b[1] != 0xa5 {
		t.Errorf("f: pread at 2^63-3 after a remount: %d, %v, % x; want 5a a5", n, err, b)
	}
	unix.Close(fd)
	must(t, retry(func() error { return unix.Truncate(fs.Path("file1"), 4096) }))
	if st := lstat(t, fs.Path("file1")); st.Size != 4096 || st.Blocks != 0 {
		t.Errorf("file1 truncated to 4096: size %d, %d blocks; want 4096 and 0", st.Size, st.Blocks)
	}
}
