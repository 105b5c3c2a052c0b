package fs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/client"
	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pooltest"
)

// nodeInterfaces is every optional node interface go-fuse dispatches on.
var nodeInterfaces = []reflect.Type{
	reflect.TypeFor[gofs.NodeAccesser](), reflect.TypeFor[gofs.NodeAllocater](),
	reflect.TypeFor[gofs.NodeCopyFileRanger](), reflect.TypeFor[gofs.NodeCreater](),
	reflect.TypeFor[gofs.NodeFlusher](), reflect.TypeFor[gofs.NodeFsyncer](),
	reflect.TypeFor[gofs.NodeGetattrer](), reflect.TypeFor[gofs.NodeGetlker](),
	reflect.TypeFor[gofs.NodeGetxattrer](), reflect.TypeFor[gofs.NodeIoctler](),
	reflect.TypeFor[gofs.NodeLinker](), reflect.TypeFor[gofs.NodeListxattrer](),
	reflect.TypeFor[gofs.NodeLookupNoder](), reflect.TypeFor[gofs.NodeLookupParenter](),
	reflect.TypeFor[gofs.NodeLookuper](), reflect.TypeFor[gofs.NodeLseeker](),
	reflect.TypeFor[gofs.NodeMkdirer](), reflect.TypeFor[gofs.NodeMknoder](),
	reflect.TypeFor[gofs.NodeOnAdder](), reflect.TypeFor[gofs.NodeOnForgetter](),
	reflect.TypeFor[gofs.NodeOpendirHandler](), reflect.TypeFor[gofs.NodeOpendirer](),
	reflect.TypeFor[gofs.NodeOpener](), reflect.TypeFor[gofs.NodeReaddirer](),
	reflect.TypeFor[gofs.NodeReader](), reflect.TypeFor[gofs.NodeReadlinker](),
	reflect.TypeFor[gofs.NodeReleaser](), reflect.TypeFor[gofs.NodeRemovexattrer](),
	reflect.TypeFor[gofs.NodeRenamer](), reflect.TypeFor[gofs.NodeRmdirer](),
	reflect.TypeFor[gofs.NodeSetattrer](), reflect.TypeFor[gofs.NodeSetlker](),
	reflect.TypeFor[gofs.NodeSetlkwer](), reflect.TypeFor[gofs.NodeSetxattrer](),
	reflect.TypeFor[gofs.NodeStatfser](), reflect.TypeFor[gofs.NodeStatxer](),
	reflect.TypeFor[gofs.NodeSymlinker](), reflect.TypeFor[gofs.NodeTmpfiler](),
	reflect.TypeFor[gofs.NodeUnlinker](), reflect.TypeFor[gofs.NodeWrapChilder](),
	reflect.TypeFor[gofs.NodeWriter](), reflect.TypeFor[gofs.NodeWritever](),
}

// TestNodeInterfaces checks that each node type implements exactly the
// operations of its kind (the compile-time assertions in fs.go say what
// it has; this says what it must not have, e.g. a directory no Read).
func TestNodeInterfaces(t *testing.T) {
	common := []string{"NodeGetattrer", "NodeStatxer", "NodeSetattrer", "NodeStatfser",
		"NodeGetxattrer", "NodeSetxattrer", "NodeListxattrer", "NodeRemovexattrer", "NodeIoctler"}
	with := func(extra ...string) []string { return append(append([]string(nil), common...), extra...) }
	for _, tc := range []struct {
		node any
		want []string
	}{
		{(*dirNode)(nil), with("NodeLookuper", "NodeCreater", "NodeTmpfiler", "NodeMknoder", "NodeMkdirer",
			"NodeSymlinker", "NodeLinker", "NodeUnlinker", "NodeRmdirer", "NodeRenamer", "NodeOpendirHandler",
			"NodeLookupNoder", "NodeLookupParenter")},
		{(*fileNode)(nil), with("NodeOpener", "NodeReader", "NodeWriter", "NodeFsyncer", "NodeFlusher",
			"NodeReleaser", "NodeAllocater", "NodeLseeker")},
		{(*symlinkNode)(nil), with("NodeReadlinker")},
		{(*specialNode)(nil), with()},
		{(*lookupNode)(nil), []string{"NodeOpener", "NodeGetattrer", "NodeStatxer", "NodeSetattrer",
			"NodeReader", "NodeWriter", "NodeReleaser", "NodeFsyncer", "NodeFlusher"}},
	} {
		typ := reflect.TypeOf(tc.node)
		var got []string
		for _, it := range nodeInterfaces {
			if typ.Implements(it) {
				got = append(got, it.Name())
			}
		}
		sort.Strings(got)
		sort.Strings(tc.want)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v implements\n  %v\nwant\n  %v", typ, got, tc.want)
		}
	}
	if _, ok := any((*dirNode)(nil)).(gofs.NodeReader); ok {
		t.Error("a directory node reads")
	}
}

// TestNewNodeKind checks that each inode kind gets its node type.
func TestNewNodeKind(t *testing.T) {
	p, _ := pooltest.MustOpen(t, pooltest.Options{Size: 64 << 20})
	defer p.Close()
	opts := &Options{}
	for _, tc := range []struct {
		mode   uint32
		target string
		want   any
	}{
		{format.ModeReg | 0o644, "", (*fileNode)(nil)},
		{format.ModeDir | 0o755, "", (*dirNode)(nil)},
		{format.ModeLnk | 0o777, "somewhere", (*symlinkNode)(nil)},
		{format.ModeFifo | 0o644, "", (*specialNode)(nil)},
		{format.ModeSock | 0o644, "", (*specialNode)(nil)},
		{format.ModeChr | 0o644, "", (*specialNode)(nil)},
		{format.ModeBlk | 0o644, "", (*specialNode)(nil)},
	} {
		name := fmt.Sprintf("kind%o", tc.mode&format.ModeType)
		in, err := p.Create(p.Root(), name, core.NewInode{Mode: tc.mode, Target: tc.target})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := newNode(p, in, in.Mode()&format.ModeType, opts)
		if reflect.TypeOf(n) != reflect.TypeOf(tc.want) {
			t.Errorf("%s: node %T, want %T", name, n, tc.want)
		}
	}
	if r := Root(p, Options{}); reflect.TypeOf(r) != reflect.TypeFor[*dirNode]() {
		t.Errorf("root node %T, want *dirNode", r)
	}
}

// TestNodeKinds runs each kind's operations through the kernel on one
// in-process mount (fsck checks the pool when the mount goes).
func TestNodeKinds(t *testing.T) {
	mnt, p := mountPoolFS(t, false)
	at := func(name string) string { return filepath.Join(mnt, name) }

	t.Run("File", func(t *testing.T) {
		path := at("file")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte("hello world"), 0); err != nil {
			t.Fatal(err)
		}
		readAt(t, f, 0, 11, "hello world")
		if err := f.Truncate(5); err != nil {
			t.Fatal(err)
		}
		readAt(t, f, 0, 16, "hello")
		if err := f.Truncate(8192); err != nil {
			t.Fatal(err)
		}
		readAt(t, f, 4096, 8, "\x00\x00\x00\x00\x00\x00\x00\x00")
		wantSize(t, path, 8192)
		// fallocate: grow, preallocate past the end, punch a hole.
		if err := unix.Fallocate(int(f.Fd()), 0, 0, 1<<20); err != nil {
			t.Fatalf("fallocate: %v", err)
		}
		wantSize(t, path, 1<<20)
		if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 1<<20, 1<<20); err != nil {
			t.Fatalf("fallocate(KEEP_SIZE): %v", err)
		}
		wantSize(t, path, 1<<20)
		if _, err := f.WriteAt(bytes.Repeat([]byte{'x'}, 8192), 65536); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 65536, 4096); err != nil {
			t.Fatalf("fallocate(PUNCH_HOLE): %v", err)
		}
		readAt(t, f, 65536+4096-2, 4, "\x00\x00xx")
		if off, err := unix.Seek(int(f.Fd()), 65536, unix.SEEK_DATA); err != nil || off != 65536+4096 {
			t.Errorf("SEEK_DATA from 65536 = %d, %v; want %d", off, err, 65536+4096)
		}
		if err := f.Sync(); err != nil {
			t.Errorf("fsync: %v", err)
		}
		// O_APPEND writes at the end; O_TRUNC empties.
		a, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Write([]byte("tail")); err != nil {
			t.Fatal(err)
		}
		a.Close()
		readAt(t, f, 1<<20, 8, "tail")
		tr, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		tr.Close()
		wantSize(t, path, 0)
		// A regular file made by mknod(2) is a file node too.
		if err := unix.Mknod(at("mknod-file"), unix.S_IFREG|0o600, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(at("mknod-file"), []byte("data"), 0); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(at("mknod-file")); err != nil || string(b) != "data" {
			t.Errorf("mknod'ed file reads %q, %v", b, err)
		}
	})

	t.Run("Dir", func(t *testing.T) {
		dir := at("dir")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		d, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if _, err := unix.Read(int(d.Fd()), make([]byte, 16)); !errors.Is(err, syscall.EISDIR) {
			t.Errorf("read(2) of a directory: %v, want EISDIR", err)
		}
		if _, err := os.OpenFile(dir, os.O_WRONLY, 0); !errors.Is(err, syscall.EISDIR) {
			t.Errorf("open(O_WRONLY) of a directory: %v, want EISDIR", err)
		}
		if err := d.Sync(); err != nil {
			t.Errorf("fsync of a directory: %v", err)
		}
		// One entry of each kind; the listing gives each its type.
		must(t, os.WriteFile(filepath.Join(dir, "f"), nil, 0o644))
		must(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
		must(t, os.Symlink("f", filepath.Join(dir, "l")))
		must(t, unix.Mkfifo(filepath.Join(dir, "p"), 0o644))
		must(t, unix.Mknod(filepath.Join(dir, "s"), unix.S_IFSOCK|0o644, 0))
		must(t, unix.Mknod(filepath.Join(dir, "c"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))))
		want := map[string]os.FileMode{"f": 0, "d": os.ModeDir, "l": os.ModeSymlink, "p": os.ModeNamedPipe,
			"s": os.ModeSocket, "c": os.ModeDevice | os.ModeCharDevice}
		for round := 0; round < 2; round++ { // the second round is served from cached nodes
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]os.FileMode{}
			for _, e := range ents {
				got[e.Name()] = e.Type()
				fi, err := os.Lstat(filepath.Join(dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Type() != e.Type() {
					t.Errorf("%s: lstat type %v, listing %v", e.Name(), fi.Mode().Type(), e.Type())
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("listing %v, want %v", got, want)
			}
		}
		if err := unix.Rmdir(filepath.Join(dir, "f")); !errors.Is(err, syscall.ENOTDIR) {
			t.Errorf("rmdir of a file: %v, want ENOTDIR", err)
		}
		if err := unix.Unlink(filepath.Join(dir, "d")); !errors.Is(err, syscall.EISDIR) {
			t.Errorf("unlink of a directory: %v, want EISDIR", err)
		}
		if err := os.Remove(dir); !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			t.Errorf("rmdir of a full directory: %v, want ENOTEMPTY", err)
		}
	})

	t.Run("Symlink", func(t *testing.T) {
		must(t, os.WriteFile(at("target"), []byte("through the link"), 0o644))
		link := at("link")
		must(t, os.Symlink("target", link))
		if s, err := os.Readlink(link); err != nil || s != "target" {
			t.Errorf("readlink = %q, %v", s, err)
		}
		fi, err := os.Lstat(link)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSymlink || fi.Size() != int64(len("target")) {
			t.Errorf("lstat: mode %v size %d", fi.Mode(), fi.Size())
		}
		if b, err := os.ReadFile(link); err != nil || string(b) != "through the link" {
			t.Errorf("reading through the link: %q, %v", b, err)
		}
		if _, err := unix.Open(link, unix.O_RDONLY|unix.O_NOFOLLOW, 0); !errors.Is(err, syscall.ELOOP) {
			t.Errorf("open(O_NOFOLLOW) of a symlink: %v, want ELOOP", err)
		}
		must(t, unix.Lchown(link, 1234, 5678))
		var st unix.Stat_t
		must(t, unix.Lstat(link, &st))
		if st.Uid != 1234 || st.Gid != 5678 {
			t.Errorf("lchown: owner %d:%d", st.Uid, st.Gid)
		}
		must(t, unix.Stat(at("target"), &st))
		if st.Uid != 0 {
			t.Errorf("lchown changed the target's owner to %d", st.Uid)
		}
		long := strings.Repeat("x/", 1000)
		must(t, os.Symlink(long, at("longlink")))
		if s, err := os.Readlink(at("longlink")); err != nil || s != long {
			t.Errorf("readlink of a %d-byte target: %d bytes, %v", len(long), len(s), err)
		}
	})

	t.Run("Special", func(t *testing.T) {
		fifo := at("fifo")
		must(t, unix.Mkfifo(fifo, 0o640))
		var st unix.Stat_t
		must(t, unix.Stat(fifo, &st))
		if st.Mode != unix.S_IFIFO|0o640 {
			t.Errorf("fifo mode %o", st.Mode)
		}
		// The kernel serves the pipe: what goes in comes out.
		fd, err := unix.Open(fifo, unix.O_RDWR|unix.O_NONBLOCK, 0)
		if err != nil {
			t.Fatalf("open fifo: %v", err)
		}
		if _, err := unix.Write(fd, []byte("ping")); err != nil {
			t.Errorf("write to fifo: %v", err)
		}
		buf := make([]byte, 8)
		if k, err := unix.Read(fd, buf); err != nil || string(buf[:k]) != "ping" {
			t.Errorf("read from fifo: %q, %v", buf[:k], err)
		}
		unix.Close(fd)

		sock := at("sock")
		must(t, unix.Mknod(sock, unix.S_IFSOCK|0o600, 0))
		must(t, unix.Stat(sock, &st))
		if st.Mode != unix.S_IFSOCK|0o600 || st.Rdev != 0 {
			t.Errorf("socket: mode %o rdev %x", st.Mode, st.Rdev)
		}
		for _, tc := range []struct {
			name string
			mode uint32
		}{{"chr", unix.S_IFCHR}, {"blk", unix.S_IFBLK}} {
			dev := unix.Mkdev(7, 42)
			must(t, unix.Mknod(at(tc.name), tc.mode|0o600, int(dev)))
			must(t, unix.Stat(at(tc.name), &st))
			if st.Mode != tc.mode|0o600 || st.Rdev != dev {
				t.Errorf("%s: mode %o rdev %x, want %o %x", tc.name, st.Mode, st.Rdev, tc.mode|0o600, dev)
			}
			// The mount is nodev: the kernel refuses, dnnfs never sees it.
			if fd, err := unix.Open(at(tc.name), unix.O_RDONLY, 0); !errors.Is(err, syscall.EACCES) {
				if err == nil {
					unix.Close(fd)
				}
				t.Errorf("open of a device on a nodev mount: %v, want EACCES", err)
			}
		}
		// Attributes change like any inode's.
		must(t, os.Chmod(fifo, 0o600))
		must(t, unix.Chown(fifo, 42, 43))
		mtime := time.Unix(1_000_000_000, 0)
		must(t, os.Chtimes(fifo, mtime, mtime))
		must(t, unix.Stat(fifo, &st))
		if st.Mode != unix.S_IFIFO|0o600 || st.Uid != 42 || st.Gid != 43 || st.Mtim.Sec != mtime.Unix() {
			t.Errorf("fifo after chmod/chown/utimes: mode %o owner %d:%d mtime %d", st.Mode, st.Uid, st.Gid, st.Mtim.Sec)
		}
	})

	t.Run("Xattr", func(t *testing.T) {
		must(t, os.WriteFile(at("xfile"), nil, 0o644))
		must(t, os.Mkdir(at("xdir"), 0o755))
		must(t, os.Symlink("xfile", at("xlink")))
		must(t, unix.Mkfifo(at("xfifo"), 0o644))
		must(t, unix.Mknod(at("xsock"), unix.S_IFSOCK|0o644, 0))
		must(t, unix.Mknod(at("xchr"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))))
		for _, tc := range []struct {
			name, attr string
		}{
			{"xfile", "user.k"}, {"xdir", "user.k"}, {"xfile", "trusted.k"}, {"xdir", "trusted.k"},
			// user.* is for regular files and directories only (the VFS
			// refuses it elsewhere); trusted.* goes anywhere.
			{"xlink", "trusted.k"}, {"xfifo", "trusted.k"}, {"xsock", "trusted.k"}, {"xchr", "trusted.k"},
		} {
			path := at(tc.name)
			val := []byte("value of " + tc.name)
			if err := unix.Lsetxattr(path, tc.attr, val, 0); err != nil {
				t.Errorf("%s: set %s: %v", tc.name, tc.attr, err)
				continue
			}
			buf := make([]byte, 64)
			if k, err := unix.Lgetxattr(path, tc.attr, buf); err != nil || !bytes.Equal(buf[:k], val) {
				t.Errorf("%s: get %s = %q, %v", tc.name, tc.attr, buf[:max(k, 0)], err)
			}
			if k, err := unix.Llistxattr(path, buf); err != nil || !bytes.Contains(buf[:k], []byte(tc.attr+"\x00")) {
				t.Errorf("%s: list = %q, %v; want %s in it", tc.name, buf[:max(k, 0)], err, tc.attr)
			}
			must(t, unix.Lremovexattr(path, tc.attr))
			if _, err := unix.Lgetxattr(path, tc.attr, buf); !errors.Is(err, unix.ENODATA) {
				t.Errorf("%s: get %s after remove: %v, want ENODATA", tc.name, tc.attr, err)
			}
		}
		if err := unix.Lsetxattr(at("xlink"), "user.k", []byte("v"), 0); !errors.Is(err, syscall.EPERM) {
			t.Errorf("user.* on a symlink: %v, want EPERM", err)
		}
		// Virtual attributes: lock state on a file, mount status on the root.
		buf := make([]byte, 1<<16)
		if k, err := unix.Getxattr(at("xfile"), XattrLocks, buf); err != nil || !bytes.HasPrefix(buf[:max(k, 0)], []byte("{")) {
			t.Errorf("%s on a file: %q, %v", XattrLocks, buf[:max(k, 0)], err)
		}
		if k, err := unix.Getxattr(mnt, XattrStatus, buf); err != nil || !bytes.HasPrefix(buf[:max(k, 0)], []byte("{")) {
			t.Errorf("%s on the root: %q, %v", XattrStatus, buf[:max(k, 0)], err)
		}
		if _, err := unix.Getxattr(at("xdir"), XattrLocks, buf); !errors.Is(err, unix.ENODATA) {
			t.Errorf("%s on a directory: %v, want ENODATA", XattrLocks, err)
		}
	})

	t.Run("LinkRenameUnlink", func(t *testing.T) {
		must(t, os.Mkdir(at("a"), 0o755))
		must(t, os.Mkdir(at("b"), 0o755))
		must(t, os.WriteFile(at("a/f"), []byte("f"), 0o644))
		must(t, os.Symlink("f", at("a/l")))
		must(t, unix.Mkfifo(at("a/p"), 0o644))
		// Hard links to each non-directory kind (linkat without
		// AT_SYMLINK_FOLLOW links the symlink itself).
		for _, name := range []string{"f", "l", "p"} {
			must(t, unix.Linkat(unix.AT_FDCWD, at("a/"+name), unix.AT_FDCWD, at("b/"+name+"2"), 0))
			var st1, st2 unix.Stat_t
			must(t, unix.Lstat(at("a/"+name), &st1))
			must(t, unix.Lstat(at("b/"+name+"2"), &st2))
			if st1.Ino != st2.Ino || st2.Nlink != 2 || st1.Mode != st2.Mode {
				t.Errorf("link of %s: ino %d/%d nlink %d mode %o/%o", name, st1.Ino, st2.Ino, st2.Nlink, st1.Mode, st2.Mode)
			}
		}
		if err := os.Link(at("a"), at("b/a2")); !errors.Is(err, syscall.EPERM) {
			t.Errorf("link of a directory: %v, want EPERM", err)
		}
		// Rename across directories, over an existing file, a directory.
		must(t, os.Rename(at("a/f"), at("b/moved")))
		if b, err := os.ReadFile(at("b/moved")); err != nil || string(b) != "f" {
			t.Errorf("renamed file reads %q, %v", b, err)
		}
		must(t, os.WriteFile(at("b/victim"), []byte("old"), 0o644))
		must(t, os.Rename(at("b/moved"), at("b/victim")))
		if b, err := os.ReadFile(at("b/victim")); err != nil || string(b) != "f" {
			t.Errorf("file renamed over another reads %q, %v", b, err)
		}
		must(t, os.Rename(at("a"), at("b/a")))
		if fi, err := os.Lstat(at("b/a/l")); err != nil || fi.Mode().Type() != os.ModeSymlink {
			t.Errorf("symlink in a renamed directory: %v, %v", fi, err)
		}
		// RENAME_EXCHANGE swaps a file and a directory.
		must(t, unix.Renameat2(unix.AT_FDCWD, at("b/victim"), unix.AT_FDCWD, at("b/a"), unix.RENAME_EXCHANGE))
		if fi, err := os.Lstat(at("b/victim")); err != nil || !fi.IsDir() {
			t.Errorf("after exchange b/victim: %v, %v; want a directory", fi, err)
		}
		if b, err := os.ReadFile(at("b/a")); err != nil || string(b) != "f" {
			t.Errorf("after exchange b/a reads %q, %v", b, err)
		}
		// Unlink each kind; a file still open keeps its data.
		f, err := os.Open(at("b/a"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, name := range []string{"b/a", "b/f2", "b/l2", "b/p2", "b/victim/l", "b/victim/p"} {
			if err := os.Remove(at(name)); err != nil {
				t.Errorf("remove %s: %v", name, err)
			}
		}
		readAt(t, f, 0, 4, "f")
		must(t, os.Remove(at("b/victim")))
		ents, err := os.ReadDir(at("b"))
		if err != nil || len(ents) != 0 {
			t.Errorf("b after removing everything: %v, %v", ents, err)
		}
	})

	t.Run("Tmpfile", func(t *testing.T) {
		fd, err := unix.Open(mnt, unix.O_TMPFILE|unix.O_RDWR, 0o600)
		if err != nil {
			t.Fatalf("O_TMPFILE: %v", err)
		}
		defer unix.Close(fd)
		if _, err := unix.Pwrite(fd, []byte("anonymous"), 0); err != nil {
			t.Fatal(err)
		}
		must(t, unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, at("named"), unix.AT_SYMLINK_FOLLOW))
		if b, err := os.ReadFile(at("named")); err != nil || string(b) != "anonymous" {
			t.Errorf("linked O_TMPFILE reads %q, %v", b, err)
		}
	})

	t.Run("StatfsStatx", func(t *testing.T) {
		must(t, os.WriteFile(at("sf"), nil, 0o644))
		must(t, os.Symlink("sf", at("sl")))
		must(t, unix.Mkfifo(at("sp"), 0o644))
		must(t, os.Mkdir(at("sd"), 0o755))
		for _, name := range []string{"sf", "sd", "sp"} {
			// STATFS goes to the node of the path's inode.
			var s unix.Statfs_t
			must(t, unix.Statfs(at(name), &s))
			if s.Blocks == 0 || s.Files == 0 || s.Bsize != format.BlockSize {
				t.Errorf("statfs of %s: %+v", name, s)
			}
		}
		for _, name := range []string{"sf", "sd", "sl", "sp"} {
			var sx unix.Statx_t
			must(t, unix.Statx(unix.AT_FDCWD, at(name), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &sx))
			if sx.Mask&unix.STATX_BTIME != 0 && sx.Btime.Sec == 0 {
				t.Errorf("statx of %s: btime reported as zero", name)
			}
		}
	})

	// An inode number freed by one kind and taken by another gets a new
	// generation, and so a new node of the new kind.
	t.Run("InoReuse", func(t *testing.T) {
		kinds := []struct {
			name string
			make func(string) error
			typ  uint32
		}{
			{"file", func(p string) error { return os.WriteFile(p, []byte("x"), 0o644) }, unix.S_IFREG},
			{"dir", func(p string) error { return os.Mkdir(p, 0o755) }, unix.S_IFDIR},
			{"link", func(p string) error { return os.Symlink("file", p) }, unix.S_IFLNK},
			{"fifo", func(p string) error { return unix.Mkfifo(p, 0o644) }, unix.S_IFIFO},
			{"file", func(p string) error { return os.WriteFile(p, []byte("x"), 0o644) }, unix.S_IFREG},
		}
		reused := 0
		var prev uint64
		for i, k := range kinds {
			path := at(fmt.Sprintf("reuse-%d-%s", i, k.name))
			must(t, k.make(path))
			var st unix.Stat_t
			must(t, unix.Lstat(path, &st))
			if st.Mode&unix.S_IFMT != k.typ {
				t.Fatalf("%s: mode %o", path, st.Mode)
			}
			if st.Ino == prev {
				reused++
			}
			// Use it as its kind through the kernel.
			switch k.typ {
			case unix.S_IFREG:
				if b, err := os.ReadFile(path); err != nil || string(b) != "x" {
					t.Errorf("%s reads %q, %v", path, b, err)
				}
			case unix.S_IFDIR:
				must(t, os.WriteFile(filepath.Join(path, "inner"), nil, 0o644))
				if ents, err := os.ReadDir(path); err != nil || len(ents) != 1 {
					t.Errorf("%s lists %v, %v", path, ents, err)
				}
				must(t, os.Remove(filepath.Join(path, "inner")))
			case unix.S_IFLNK:
				if s, err := os.Readlink(path); err != nil || s != "file" {
					t.Errorf("%s: readlink %q, %v", path, s, err)
				}
			}
			prev = st.Ino
			must(t, os.Remove(path))
			// The number is free again once the kernel forgets it.
			deadline := time.Now().Add(5 * time.Second)
			for p.Inode(core.Ino(st.Ino)) != nil && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		}
		if reused == 0 {
			// Freed numbers are taken last-in first-out; if that changes,
			// this test must find another way to reuse one.
			t.Errorf("no inode number was reused by the next kind: nothing here tested reuse")
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readAt(t *testing.T, f *os.File, off int64, n int, want string) {
	t.Helper()
	buf := make([]byte, n)
	k, err := f.ReadAt(buf, off)
	if err != nil && !(errors.Is(err, io.EOF) && k == len(want)) {
		t.Errorf("read %d bytes at %d: %v", n, off, err)
	}
	if string(buf[:k]) != want {
		t.Errorf("read at %d: %q, want %q", off, buf[:k], want)
	}
}

func wantSize(t *testing.T, path string, size int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != size {
		t.Errorf("%s: size %d, want %d", path, fi.Size(), size)
	}
}

// TestTableNodes: an embedding table is a file node whose data goes to
// the SSD tier, also when the node was made while the file was a plain
// one; its request file is a node of its own, not a pool inode.
func TestTableNodes(t *testing.T) {
	mnt, _ := mountPoolFS(t, true)
	path := filepath.Join(mnt, "emb")
	f, err := os.Create(path) // the node is made now, for a plain file
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	must(t, unix.Fsetxattr(int(f.Fd()), XattrTable, []byte("rows=16,dim=4,dtype=f32"), 0))
	row := make([]byte, 16)
	for i, v := range []float32{1, 2, 3, 4} {
		binary.LittleEndian.PutUint32(row[4*i:], math.Float32bits(v))
	}
	if _, err := f.WriteAt(row, 3*16); err != nil {
		t.Fatalf("writing a row: %v", err)
	}
	readAt(t, f, 3*16, 16, string(row))
	if err := f.Sync(); err != nil {
		t.Errorf("fsync of a table: %v", err)
	}
	if _, err := f.WriteAt(row, 16*16); !errors.Is(err, syscall.EFBIG) {
		t.Errorf("writing past the table's end: %v, want EFBIG", err)
	}
	buf := make([]byte, 256)
	if k, err := unix.Getxattr(path, XattrTable, buf); err != nil || !bytes.HasPrefix(buf[:max(k, 0)], []byte("rows=16,dim=4,dtype=f32,")) {
		t.Errorf("%s reads %q, %v", XattrTable, buf[:max(k, 0)], err)
	}
	// A second name reaches the same inode and data.
	must(t, os.Link(path, filepath.Join(mnt, "emb2")))
	if b, err := os.ReadFile(filepath.Join(mnt, "emb2")); err != nil || len(b) != 256 || !bytes.Equal(b[48:64], row) {
		t.Errorf("the table through its second name: %d bytes, %v", len(b), err)
	}

	// The request file: found by name, not listed, not linkable.
	lp := path + LookupSuffix
	var st, tst unix.Stat_t
	must(t, unix.Stat(lp, &st))
	must(t, unix.Stat(path, &tst))
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != tst.Ino|lookupInoBit {
		t.Errorf("%s: mode %o ino %#x (table ino %#x)", lp, st.Mode, st.Ino, tst.Ino)
	}
	lf, err := os.OpenFile(lp, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	req, err := client.EncodeLookup(7, client.Gather, client.F32, []int64{3}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lf.Write(req); err != nil {
		t.Fatalf("writing a request: %v", err)
	}
	res := make([]byte, 4096)
	k, err := lf.Read(res)
	if err != nil {
		t.Fatalf("reading the result: %v", err)
	}
	r, err := client.DecodeResult(res[:k])
	if err != nil || r.Err() != nil || r.Tag != 7 || !bytes.Equal(r.Payload, row) {
		t.Errorf("result %+v, %v; want tag 7 and row 3", r, err)
	}
	if err := os.Link(lp, filepath.Join(mnt, "req")); !errors.Is(err, syscall.EXDEV) {
		t.Errorf("link of a request file: %v, want EXDEV", err)
	}
	ents, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !reflect.DeepEqual(names, []string{"emb", "emb2"}) {
		t.Errorf("root lists %v, want [emb emb2]", names)
	}
}
