package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// An inode lives as long as anything can still reach it: a name, an open
// file, an mmap, or a kernel reference without either (an O_PATH
// descriptor, which /proc/self/fd/N reopens). These tests unlink a file
// still so reachable, then create many files (which would take its inode
// number and blocks if they had been freed) and check that the old file
// still reads its own bytes and that writing it changes no other file.

// churn creates n files of 64 KiB each in dir and returns their contents
// by path, so the caller can check later that none of them changed.
func churn(t *testing.T, dir string, n int, seed uint64) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf("churn-%d-%d", seed, i))
		data := randBytes(seed+uint64(i), 64<<10)
		writeFile(t, p, data, 0o644)
		files[p] = data
	}
	return files
}

func checkChurn(t *testing.T, files map[string][]byte, ino uint64) {
	t.Helper()
	for p, data := range files {
		if st := lstat(t, p); st.Ino == ino {
			t.Errorf("%s got inode %d, the number of the unlinked file still referenced", p, ino)
		}
		if got := readFile(t, p); string(got) != string(data) {
			t.Errorf("%s changed: %s", p, firstDiff(got, data))
		}
	}
}

func procFd(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

func TestUnlinkedOPathKeepsInode(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "128MiB")
	// The new files go in a directory of their own, removed at the end;
	// the root's first entry block is allocated before the baseline.
	empty := statfs(t, fs.Mnt)
	dir := fs.Path("churn")
	must(t, os.Mkdir(dir, 0o755))
	must(t, os.Remove(dir))
	var before unix.Statfs_t
	// The directory's inode is freed when the kernel forgets it (FORGET
	// follows rmdir asynchronously).
	if !eventually(func() bool { before = statfs(t, fs.Mnt); return before.Ffree == empty.Ffree }) {
		t.Fatalf("free inodes %d after mkdir+rmdir, want %d", before.Ffree, empty.Ffree)
	}
	p := fs.Path("weights.bin")
	data := randBytes(7, 1<<20)
	writeFile(t, p, data, 0o644)
	ino := lstat(t, p).Ino

	opath := openFd(t, p, unix.O_PATH, 0)
	must(t, os.Remove(p))
	must(t, os.Mkdir(dir, 0o755))
	files := churn(t, dir, 48, 100)

	if st := fstat(t, opath); st.Ino != ino || st.Nlink != 0 || st.Size != int64(len(data)) {
		t.Errorf("fstat of the O_PATH descriptor: ino %d nlink %d size %d, want ino %d nlink 0 size %d",
			st.Ino, st.Nlink, st.Size, ino, len(data))
	}
	rd := openFd(t, procFd(opath), unix.O_RDONLY, 0)
	wantBytes(t, "unlinked file reopened through /proc/self/fd of an O_PATH descriptor", preadFull(t, rd, len(data), 0), data)
	closeFd(t, rd)

	// Writing through a reopened descriptor changes that file only.
	wr := openFd(t, procFd(opath), unix.O_RDWR, 0)
	junk := randBytes(8, len(data))
	pwriteFull(t, wr, junk, 0)
	must(t, unix.Fsync(wr))
	closeFd(t, wr)
	more := churn(t, dir, 8, 200)
	checkChurn(t, files, ino)
	checkChurn(t, more, ino)
	rd = openFd(t, procFd(opath), unix.O_RDONLY, 0)
	wantBytes(t, "unlinked file after a write through it", preadFull(t, rd, len(junk), 0), junk)
	closeFd(t, rd)

	// With the last reference gone the space and the inode come back.
	closeFd(t, opath)
	for path := range files {
		must(t, os.Remove(path))
	}
	for path := range more {
		must(t, os.Remove(path))
	}
	must(t, os.Remove(dir))
	var last unix.Statfs_t
	if !eventually(func() bool { last = statfs(t, fs.Mnt); return last.Bfree == before.Bfree && last.Ffree == before.Ffree }) {
		t.Errorf("after the last reference went: free blocks %d inodes %d, want %d and %d as before",
			last.Bfree, last.Ffree, before.Bfree, before.Ffree)
	}
}

func TestUnlinkedSymlinkKeepsTarget(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")
	p := fs.Path("link")
	target := "checkpoints/step-000123/model.safetensors"
	must(t, os.Symlink(target, p))
	ino := lstat(t, p).Ino
	fd := openFd(t, p, unix.O_PATH|unix.O_NOFOLLOW, 0)
	defer closeFd(t, fd)
	must(t, os.Remove(p))
	for i := 0; i < 64; i++ {
		must(t, os.Symlink(fmt.Sprintf("other-target-%03d-%s", i, target), fs.Path(fmt.Sprintf("l%d", i))))
		if st := lstat(t, fs.Path(fmt.Sprintf("l%d", i))); st.Ino == ino {
			t.Fatalf("a new symlink got inode %d, the number of the unlinked one still referenced", ino)
		}
	}
	buf := make([]byte, 256)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		t.Fatalf("readlinkat of the unlinked symlink's O_PATH descriptor: %v", err)
	}
	if got := string(buf[:n]); got != target {
		t.Errorf("unlinked symlink reads %q, want %q", got, target)
	}
}

func TestUnlinkedMmapKeepsData(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "128MiB")
	p := fs.Path("mapped.bin")
	data := randBytes(9, 256<<10)
	writeFile(t, p, data, 0o644)
	ino := lstat(t, p).Ino
	fd := openFd(t, p, unix.O_RDWR, 0)
	m, err := unix.Mmap(fd, 0, len(data), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	closeFd(t, fd)
	must(t, os.Remove(p))
	files := churn(t, fs.Mnt, 64, 300)
	wantBytes(t, "mapping of the unlinked file after many creates", m, data)
	// Stores through the mapping reach the unlinked file only.
	for i := range m {
		m[i] ^= 0xff
	}
	must(t, unix.Msync(m, unix.MS_SYNC))
	more := churn(t, fs.Mnt, 16, 400)
	checkChurn(t, files, ino)
	checkChurn(t, more, ino)
	must(t, unix.Munmap(m))
}

// TestOrphansAfterCrash: files unlinked while still referenced are on the
// persistent orphan set; after kill -9 the next mount frees them, and the
// pool checks clean (the harness runs fsck at cleanup).
func TestOrphansAfterCrash(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "128MiB")
	writeFileSync(t, fs.Path("keep"), []byte("kept"), 0o644)
	before := statfs(t, fs.Mnt)
	var fds []int
	for i, flags := range []int{unix.O_PATH, unix.O_RDONLY, unix.O_RDWR} {
		p := fs.Path(fmt.Sprintf("orphan%d", i))
		writeFile(t, p, randBytes(uint64(i), 1<<20), 0o644)
		fds = append(fds, openFd(t, p, flags, 0))
		must(t, os.Remove(p))
	}
	if s := statfs(t, fs.Mnt); s.Bfree+3*(1<<20)/4096 > before.Bfree {
		t.Fatalf("free blocks %d -> %d: the unlinked but referenced files' space came back", before.Bfree, s.Bfree)
	}
	fs.Kill(t)
	for _, fd := range fds {
		unix.Close(fd)
	}
	// The crashed pool holds the orphans; fsck accepts them there (they
	// are legitimate on a pool left mounted) and the mount frees them.
	if out, code := harness.Fsck(t, fs.Pool); code != 0 || !strings.Contains(out, "orphan") {
		t.Errorf("fsck of the crashed pool with 3 orphans: exit %d, want 0 and the orphans named\n%s", code, out)
	}
	fs = fs.Remount(t)
	if s := statfs(t, fs.Mnt); s.Bfree != before.Bfree || s.Ffree != before.Ffree {
		t.Errorf("after the crash and remount: free blocks %d inodes %d, want %d and %d (orphans freed)",
			s.Bfree, s.Ffree, before.Bfree, before.Ffree)
	}
	wantBytes(t, "file kept across the crash", readFile(t, fs.Path("keep")), []byte("kept"))
}
