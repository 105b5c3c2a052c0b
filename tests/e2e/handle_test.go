package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func nameToHandle(t *testing.T, path string) unix.FileHandle {
	t.Helper()
	var h unix.FileHandle
	must(t, retry(func() (err error) { h, _, err = unix.NameToHandleAt(unix.AT_FDCWD, path, 0); return err }))
	return h
}

// openHandle opens h on the file system mounted at mnt.
func openHandle(t *testing.T, mnt string, h unix.FileHandle, flags int) (int, error) {
	t.Helper()
	mfd := openFd(t, mnt, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	defer closeFd(t, mfd)
	return retryN(func() (int, error) { return unix.OpenByHandleAt(mfd, h, flags) })
}

// wantHandleFile opens h on mnt and checks it is the file with content want.
func wantHandleFile(t *testing.T, what, mnt string, h unix.FileHandle, ino uint64, want []byte) {
	t.Helper()
	fd, err := openHandle(t, mnt, h, unix.O_RDONLY)
	if err != nil {
		t.Errorf("%s: open_by_handle_at: %s", what, errnoName(errnoOf(err)))
		return
	}
	defer closeFd(t, fd)
	if got := fstat(t, fd).Ino; got != ino {
		t.Errorf("%s: open_by_handle_at opened inode %d, want %d", what, got, ino)
	}
	wantBytes(t, what, preadFull(t, fd, len(want)+1, 0), want)
}

// wantHandleDir opens h on mnt and checks it is the directory ino, with
// its path reconnected (as /proc/self/fd shows it) to want.
func wantHandleDir(t *testing.T, what, mnt string, h unix.FileHandle, ino uint64, want string) {
	t.Helper()
	fd, err := openHandle(t, mnt, h, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		t.Errorf("%s: open_by_handle_at: %s", what, errnoName(errnoOf(err)))
		return
	}
	defer closeFd(t, fd)
	if got := fstat(t, fd).Ino; got != ino {
		t.Errorf("%s: open_by_handle_at opened inode %d, want %d", what, got, ino)
	}
	if p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err != nil || p != want {
		t.Errorf("%s: opened directory is at %q (%v), want %q", what, p, err, want)
	}
}

// TestFileHandles: name_to_handle_at/open_by_handle_at work as on tmpfs.
// A live file's or directory's handle opens it after the kernel dropped
// its caches, and after a remount (the kernel has never seen the node:
// it resolves it by node ID, as an NFS server does after a restart). A
// deleted file's handle gives ESTALE (unless the file is still open, as on
// tmpfs), also once its inode number belongs
// to a new file (the generation differs), never the other file.
func TestFileHandles(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64m")
	ref := tmpfsDir(t)
	content := []byte("handle content")
	type handles struct {
		file, dir, gone unix.FileHandle
		fileIno, dirIno uint64
	}
	mk := func(root string) handles {
		must(t, os.MkdirAll(filepath.Join(root, "d", "sub"), 0o755))
		writeFile(t, filepath.Join(root, "d", "sub", "file"), content, 0o644)
		writeFile(t, filepath.Join(root, "gone"), []byte("deleted"), 0o644)
		h := handles{
			file:    nameToHandle(t, filepath.Join(root, "d", "sub", "file")),
			dir:     nameToHandle(t, filepath.Join(root, "d", "sub")),
			gone:    nameToHandle(t, filepath.Join(root, "gone")),
			fileIno: lstat(t, filepath.Join(root, "d", "sub", "file")).Ino,
			dirIno:  lstat(t, filepath.Join(root, "d", "sub")).Ino,
		}
		must(t, os.Remove(filepath.Join(root, "gone")))
		return h
	}
	check := func(name, root string, h handles) {
		t.Helper()
		wantHandleFile(t, name+": live file", root, h.file, h.fileIno, content)
		wantHandleDir(t, name+": directory", root, h.dir, h.dirIno, filepath.Join(root, "d", "sub"))
		_, err := openHandle(t, root, h.gone, unix.O_RDONLY)
		wantErrno(t, name+": open_by_handle_at of a deleted file", err, unix.ESTALE)
	}
	// As on tmpfs, a deleted file that something holds open still opens.
	for _, root := range []string{ref, fs.Path()} {
		p := filepath.Join(root, "held")
		writeFile(t, p, []byte("held"), 0o644)
		h, ino := nameToHandle(t, p), lstat(t, p).Ino
		fd := openFd(t, p, unix.O_RDONLY, 0)
		must(t, os.Remove(p))
		wantHandleFile(t, root+": deleted but open", root, h, ino, []byte("held"))
		closeFd(t, fd)
	}
	hr := mk(ref)
	check("tmpfs", ref, hr)
	hd := mk(fs.Path())
	check("dnnfs", fs.Path(), hd)

	// The kernel forgets what nothing uses; the handles still resolve.
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
		t.Logf("cannot drop the kernel's caches: %v", err)
	}
	check("dnnfs after drop_caches", fs.Path(), hd)

	// A new mount has never seen these node IDs.
	fs = fs.Remount(t)
	check("dnnfs after a remount", fs.Path(), hd)

	// The deleted file's inode number, given to a new file, keeps its old
	// handle stale; the new file's own handle opens it.
	victim := fs.Path("victim")
	writeFile(t, victim, []byte("old"), 0o644)
	old, oldIno := nameToHandle(t, victim), lstat(t, victim).Ino
	must(t, os.Remove(victim))
	_, err := openHandle(t, fs.Path(), old, unix.O_RDONLY)
	wantErrno(t, "open_by_handle_at of a just deleted file", err, unix.ESTALE)
	n := 0
	reused := eventually(func() bool {
		p := fs.Path(fmt.Sprintf("new%d", n))
		n++
		writeFile(t, p, []byte("new"), 0o644)
		return lstat(t, p).Ino == oldIno
	})
	if !reused {
		t.Fatalf("inode %d was never given to a new file; cannot check the generation", oldIno)
	}
	newPath := fs.Path(fmt.Sprintf("new%d", n-1))
	_, err = openHandle(t, fs.Path(), old, unix.O_RDONLY)
	wantErrno(t, "open_by_handle_at of a deleted file whose inode number was reused", err, unix.ESTALE)
	wantHandleFile(t, "the new file's handle", fs.Path(), nameToHandle(t, newPath), oldIno, []byte("new"))
	must(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0))
	_, err = openHandle(t, fs.Path(), old, unix.O_RDONLY)
	wantErrno(t, "open_by_handle_at of a reused inode's old handle after drop_caches", err, unix.ESTALE)
}
