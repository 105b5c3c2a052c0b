package e2e_test

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/format"
)

func statxAll(t *testing.T, path string) unix.Statx_t {
	t.Helper()
	var x unix.Statx_t
	must(t, retry(func() error {
		return unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x)
	}))
	return x
}

func sxEqual(a, b unix.StatxTimestamp) bool { return a.Sec == b.Sec && a.Nsec == b.Nsec }

// makeBtimeFiles makes one of each kind of inode in root.
func makeBtimeFiles(t *testing.T, root string) []string {
	t.Helper()
	closeFd(t, openFd(t, filepath.Join(root, "file"), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644))
	must(t, os.Mkdir(filepath.Join(root, "dir"), 0o755))
	must(t, os.Symlink("file", filepath.Join(root, "link")))
	must(t, retry(func() error { return unix.Mkfifo(filepath.Join(root, "fifo"), 0o644) }))
	return []string{"file", "dir", "link", "fifo"}
}

// TestBirthTime: statx reports STATX_BTIME on dnnfs as on tmpfs: the time
// the inode was made (its ctime and mtime at that moment), unchanged by
// later writes, chmod and rename, and kept across a remount.
func TestBirthTime(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64m")
	ref := tmpfsDir(t)
	born := map[string]unix.StatxTimestamp{}
	for _, root := range []string{ref, fs.Path()} {
		for _, name := range makeBtimeFiles(t, root) {
			x := statxAll(t, filepath.Join(root, name))
			if x.Mask&unix.STATX_BTIME == 0 {
				t.Errorf("%s: statx mask %#x has no STATX_BTIME", filepath.Join(root, name), x.Mask)
				continue
			}
			if !sxEqual(x.Btime, x.Ctime) || !sxEqual(x.Btime, x.Mtime) {
				t.Errorf("%s: new inode's btime %d.%09d differs from its ctime %d.%09d or mtime %d.%09d",
					filepath.Join(root, name), x.Btime.Sec, x.Btime.Nsec, x.Ctime.Sec, x.Ctime.Nsec, x.Mtime.Sec, x.Mtime.Nsec)
			}
			if root == fs.Path() {
				born[name] = x.Btime
			}
		}
	}
	// Changes after birth leave it alone.
	writeFile(t, fs.Path("file"), []byte("more"), 0o644)
	must(t, os.Chmod(fs.Path("file"), 0o600))
	must(t, os.Rename(fs.Path("dir"), fs.Path("dir2")))
	writeFile(t, fs.Path("dir2", "child"), nil, 0o644)
	fs = fs.Remount(t)
	for name, want := range born {
		if name == "dir" {
			name = "dir2"
		}
		x := statxAll(t, fs.Path(name))
		if x.Mask&unix.STATX_BTIME == 0 || !sxEqual(x.Btime, want) {
			t.Errorf("%s after changes and a remount: btime %d.%09d (mask %#x), want %d.%09d",
				name, x.Btime.Sec, x.Btime.Nsec, x.Mask, want.Sec, want.Nsec)
		}
	}
}

// TestBirthTimeUnknown: an inode written before birth times were kept
// (btime 0 on media) reports no STATX_BTIME rather than a 1970 date, and
// fsck accepts it (the harness runs fsck after the test).
func TestBirthTimeUnknown(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64m")
	writeFile(t, fs.Path("old"), []byte("x"), 0o644)
	ino := lstat(t, fs.Path("old")).Ino
	fs.Unmount(t)

	f, err := os.OpenFile(fs.Pool, os.O_RDWR, 0)
	must(t, err)
	st, err := f.Stat()
	must(t, err)
	sbBuf := make([]byte, format.SuperSize)
	_, err = f.ReadAt(sbBuf, 0)
	must(t, err)
	sb, err := format.DecodeSuperblock(sbBuf, st.Size())
	must(t, err)
	slot := make([]byte, format.InodeSize)
	off := int64(sb.InodeOff(format.Ino(ino)))
	_, err = f.ReadAt(slot, off)
	must(t, err)
	d, err := format.DecodeInode(slot)
	must(t, err)
	if d.Btime == 0 {
		t.Fatalf("inode %d has no birth time on media", ino)
	}
	d.Btime = 0
	d.Encode(slot)
	_, err = f.WriteAt(slot, off)
	must(t, err)
	must(t, f.Close())

	fs = fs.Remount(t)
	x := statxAll(t, fs.Path("old"))
	if x.Mask&unix.STATX_BTIME != 0 {
		t.Errorf("an inode without a stored birth time: statx reports STATX_BTIME %d.%09d", x.Btime.Sec, x.Btime.Nsec)
	}
	if x.Mask&unix.STATX_BASIC_STATS != unix.STATX_BASIC_STATS || x.Size != 1 {
		t.Errorf("statx of an inode without a birth time: mask %#x, size %d", x.Mask, x.Size)
	}
}
