package e2e_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// TestErrnos checks that each failing operation returns the errno a kernel
// file system returns, and that the failed operation changed nothing.
func TestErrnos(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")

	// Each subtest works in its own directory.
	dir := func(t *testing.T) string {
		d := fs.Path(strings.ReplaceAll(t.Name(), "/", "_"))
		must(t, os.Mkdir(d, 0o755))
		return d
	}

	t.Run("ENOENT", func(t *testing.T) {
		d := dir(t)
		missing := filepath.Join(d, "missing")
		_, err := os.Open(missing)
		wantErrno(t, "open missing", err, unix.ENOENT)
		_, err = os.OpenFile(missing, os.O_RDWR, 0)
		wantErrno(t, "open(O_RDWR) missing", err, unix.ENOENT)
		wantErrno(t, "unlink missing", os.Remove(missing), unix.ENOENT)
		wantErrno(t, "rmdir missing", unix.Rmdir(missing), unix.ENOENT)
		wantErrno(t, "rename missing source", rename(missing, filepath.Join(d, "x")), unix.ENOENT)
		wantErrno(t, "stat missing", unix.Lstat(missing, new(unix.Stat_t)), unix.ENOENT)
		wantErrno(t, "create in a missing directory", os.WriteFile(filepath.Join(missing, "f"), nil, 0o644), unix.ENOENT)
		if _, err := os.Lstat(filepath.Join(d, "x")); !os.IsNotExist(err) {
			t.Errorf("failed rename created its target: lstat err=%v", err)
		}
	})

	t.Run("EEXIST", func(t *testing.T) {
		d := dir(t)
		f := filepath.Join(d, "f")
		writeFile(t, f, []byte("original"), 0o644)
		sub := filepath.Join(d, "sub")
		must(t, os.Mkdir(sub, 0o755))

		_, err := os.OpenFile(f, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		wantErrno(t, "open(O_CREAT|O_EXCL) existing file", err, unix.EEXIST)
		_, err = os.OpenFile(sub, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		wantErrno(t, "open(O_CREAT|O_EXCL) existing directory", err, unix.EEXIST)
		wantErrno(t, "mkdir existing directory", os.Mkdir(sub, 0o755), unix.EEXIST)
		wantErrno(t, "mkdir over existing file", os.Mkdir(f, 0o755), unix.EEXIST)
		other := filepath.Join(d, "other")
		writeFile(t, other, []byte("other"), 0o644)
		wantErrno(t, "link onto existing file", os.Link(other, f), unix.EEXIST)
		wantErrno(t, "link onto existing directory", os.Link(other, sub), unix.EEXIST)
		wantErrno(t, "symlink onto existing file", os.Symlink("target", f), unix.EEXIST)
		wantErrno(t, "symlink onto existing directory", os.Symlink("target", sub), unix.EEXIST)

		wantBytes(t, "file after the failed creates", readFile(t, f), []byte("original"))
		if st := lstat(t, other); st.Nlink != 1 {
			t.Errorf("%s: nlink %d after a failed link, want 1", other, st.Nlink)
		}
		if st := lstat(t, sub); st.Mode&unix.S_IFMT != unix.S_IFDIR {
			t.Errorf("%s is no longer a directory (mode %o)", sub, st.Mode)
		}
	})

	t.Run("ENOTEMPTY", func(t *testing.T) {
		d := dir(t)
		full := filepath.Join(d, "full")
		must(t, os.Mkdir(full, 0o755))
		writeFile(t, filepath.Join(full, "child"), []byte("c"), 0o644)
		empty := filepath.Join(d, "empty")
		must(t, os.Mkdir(empty, 0o755))
		full2 := filepath.Join(d, "full2")
		must(t, os.MkdirAll(filepath.Join(full2, "subdir"), 0o755))

		wantErrno(t, "rmdir non-empty directory", unix.Rmdir(full), unix.ENOTEMPTY)
		wantErrno(t, "rmdir directory holding a subdirectory", unix.Rmdir(full2), unix.ENOTEMPTY)
		wantErrno(t, "rename directory over non-empty directory", rename(empty, full), unix.ENOTEMPTY)
		wantBytes(t, "child after the failed rename", readFile(t, filepath.Join(full, "child")), []byte("c"))
		if _, err := os.Stat(empty); err != nil {
			t.Errorf("source of the failed rename: %v", err)
		}
		// Positive control: over an empty directory the rename works.
		must(t, rename(full, empty))
		wantBytes(t, "child after renaming over an empty directory", readFile(t, filepath.Join(empty, "child")), []byte("c"))
		checkDirNlinks(t, d, "after ENOTEMPTY checks")
	})

	t.Run("EISDIR", func(t *testing.T) {
		d := dir(t)
		sub := filepath.Join(d, "sub")
		must(t, os.Mkdir(sub, 0o755))
		f := filepath.Join(d, "f")
		writeFile(t, f, []byte("file"), 0o644)

		_, err := os.OpenFile(sub, os.O_WRONLY, 0)
		wantErrno(t, "open directory O_WRONLY", err, unix.EISDIR)
		_, err = os.OpenFile(sub, os.O_RDWR, 0)
		wantErrno(t, "open directory O_RDWR", err, unix.EISDIR)
		wantErrno(t, "unlink a directory", unix.Unlink(sub), unix.EISDIR)
		wantErrno(t, "rename file over directory", rename(f, sub), unix.EISDIR)
		if st := lstat(t, sub); st.Mode&unix.S_IFMT != unix.S_IFDIR {
			t.Errorf("%s is no longer a directory", sub)
		}
		wantBytes(t, "file after the failed rename", readFile(t, f), []byte("file"))
	})

	t.Run("ENOTDIR", func(t *testing.T) {
		d := dir(t)
		f := filepath.Join(d, "f")
		writeFile(t, f, []byte("file"), 0o644)
		sub := filepath.Join(d, "sub")
		must(t, os.Mkdir(sub, 0o755))

		wantErrno(t, "rmdir a file", unix.Rmdir(f), unix.ENOTDIR)
		_, err := os.Open(filepath.Join(f, "x"))
		wantErrno(t, "open path through a file", err, unix.ENOTDIR)
		wantErrno(t, "stat path through a file", unix.Lstat(filepath.Join(f, "x"), new(unix.Stat_t)), unix.ENOTDIR)
		wantErrno(t, "create path through a file", os.WriteFile(filepath.Join(f, "x"), nil, 0o644), unix.ENOTDIR)
		wantErrno(t, "mkdir path through a file", os.Mkdir(filepath.Join(f, "x"), 0o755), unix.ENOTDIR)
		wantErrno(t, "rename directory over file", rename(sub, f), unix.ENOTDIR)
		_, err = os.ReadDir(f)
		wantErrno(t, "opendir a file", err, unix.ENOTDIR)
		wantBytes(t, "file after the failed rename", readFile(t, f), []byte("file"))
	})

	t.Run("ENAMETOOLONG", func(t *testing.T) {
		d := dir(t)
		long := strings.Repeat("n", 256)
		max := strings.Repeat("m", 255)
		src := filepath.Join(d, "src")
		writeFile(t, src, []byte("src"), 0o644)

		_, err := os.Create(filepath.Join(d, long))
		wantErrno(t, "create 256-byte name", err, unix.ENAMETOOLONG)
		wantErrno(t, "mkdir 256-byte name", os.Mkdir(filepath.Join(d, long), 0o755), unix.ENAMETOOLONG)
		wantErrno(t, "rename to 256-byte name", rename(src, filepath.Join(d, long)), unix.ENAMETOOLONG)
		wantErrno(t, "link to 256-byte name", os.Link(src, filepath.Join(d, long)), unix.ENAMETOOLONG)
		wantErrno(t, "symlink to 256-byte name", os.Symlink("src", filepath.Join(d, long)), unix.ENAMETOOLONG)
		wantErrno(t, "stat 256-byte name", unix.Lstat(filepath.Join(d, long), new(unix.Stat_t)), unix.ENAMETOOLONG)

		// 255 bytes is legal for every one of them.
		for i, op := range []func(string) error{
			func(p string) error { return os.WriteFile(p, []byte("x"), 0o644) },
			func(p string) error { return os.Mkdir(p, 0o755) },
			func(p string) error { return os.Link(src, p) },
			func(p string) error { return os.Symlink("src", p) },
		} {
			sd := filepath.Join(d, "ok"+string(rune('0'+i)))
			must(t, os.Mkdir(sd, 0o755))
			if err := op(filepath.Join(sd, max)); err != nil {
				t.Errorf("operation %d with a 255-byte name: %v", i, err)
			}
		}
		must(t, rename(src, filepath.Join(d, max)))
		ents, err := os.ReadDir(d)
		must(t, err)
		for _, e := range ents {
			if len(e.Name()) > 255 {
				t.Errorf("directory lists a %d-byte name", len(e.Name()))
			}
		}
	})

	t.Run("EINVAL", func(t *testing.T) {
		d := dir(t)
		a := filepath.Join(d, "a")
		must(t, os.MkdirAll(filepath.Join(a, "b", "c"), 0o755))
		wantErrno(t, "rename directory into its own subdirectory", rename(a, filepath.Join(a, "b", "c", "a")), unix.EINVAL)
		wantErrno(t, "rename directory into its own child", rename(a, filepath.Join(a, "x")), unix.EINVAL)
		f, g := filepath.Join(d, "f"), filepath.Join(d, "g")
		writeFile(t, f, []byte("f"), 0o644)
		writeFile(t, g, []byte("g"), 0o644)
		err := retry(func() error {
			return unix.Renameat2(unix.AT_FDCWD, f, unix.AT_FDCWD, g, unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE)
		})
		wantErrno(t, "renameat2(NOREPLACE|EXCHANGE)", err, unix.EINVAL)
		wantBytes(t, "f after the failed renameat2", readFile(t, f), []byte("f"))
		wantBytes(t, "g after the failed renameat2", readFile(t, g), []byte("g"))
		if _, err := os.Stat(filepath.Join(a, "b", "c")); err != nil {
			t.Errorf("tree after the failed renames: %v", err)
		}
		checkDirNlinks(t, d, "after EINVAL checks")
	})

	t.Run("ENODATA_ERANGE", func(t *testing.T) {
		d := dir(t)
		f := filepath.Join(d, "f")
		writeFile(t, f, nil, 0o644)
		_, err := unix.Getxattr(f, "user.missing", make([]byte, 64))
		wantErrno(t, "getxattr missing", err, unix.ENODATA)
		_, err = unix.Getxattr(f, "user.missing", nil)
		wantErrno(t, "getxattr missing (size query)", err, unix.ENODATA)
		wantErrno(t, "removexattr missing", unix.Removexattr(f, "user.missing"), unix.ENODATA)

		val := []byte("0123456789abcdef")
		must(t, unix.Setxattr(f, "user.v", val, 0))
		n, err := unix.Getxattr(f, "user.v", nil)
		if err != nil || n != len(val) {
			t.Errorf("getxattr size query: n=%d err=%v, want %d", n, err, len(val))
		}
		_, err = unix.Getxattr(f, "user.v", make([]byte, len(val)-1))
		wantErrno(t, "getxattr with a too-small buffer", err, unix.ERANGE)
		_, err = unix.Listxattr(f, make([]byte, 3))
		wantErrno(t, "listxattr with a too-small buffer", err, unix.ERANGE)
		buf := make([]byte, len(val))
		n, err = unix.Getxattr(f, "user.v", buf)
		if err != nil || !bytes.Equal(buf[:n], val) {
			t.Errorf("getxattr with an exact buffer: %q, %v", buf[:n], err)
		}
	})

	t.Run("EXDEV", func(t *testing.T) {
		d := dir(t)
		other := tmpfsDir(t)
		f := filepath.Join(d, "f")
		writeFile(t, f, []byte("dnnfs"), 0o644)
		g := filepath.Join(other, "g")
		writeFile(t, g, []byte("tmpfs"), 0o644)

		wantErrno(t, "rename dnnfs -> tmpfs", rename(f, filepath.Join(other, "f")), unix.EXDEV)
		wantErrno(t, "rename tmpfs -> dnnfs", rename(g, filepath.Join(d, "g")), unix.EXDEV)
		wantErrno(t, "link dnnfs -> tmpfs", os.Link(f, filepath.Join(other, "f")), unix.EXDEV)
		wantErrno(t, "link tmpfs -> dnnfs", os.Link(g, filepath.Join(d, "g")), unix.EXDEV)
		wantBytes(t, "dnnfs file", readFile(t, f), []byte("dnnfs"))
		wantBytes(t, "tmpfs file", readFile(t, g), []byte("tmpfs"))
		for _, p := range []string{filepath.Join(other, "f"), filepath.Join(d, "g")} {
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Errorf("%s exists after a failed cross-device operation (err=%v)", p, err)
			}
		}
	})

	t.Run("EPERM_link_dir", func(t *testing.T) {
		d := dir(t)
		sub := filepath.Join(d, "sub")
		must(t, os.Mkdir(sub, 0o755))
		wantErrno(t, "link to a directory", os.Link(sub, filepath.Join(d, "hard")), unix.EPERM)
		if st := lstat(t, sub); st.Nlink != 2 {
			t.Errorf("directory nlink %d after the failed link, want 2", st.Nlink)
		}
		checkDirNlinks(t, d, "after link to a directory")
	})

	checkDirNlinks(t, fs.Mnt, "end of TestErrnos")
}

// TestENOSPC fills a small pool and checks that the failure is ENOSPC, that
// everything written before is intact, and that deleting a file gives the
// space back.
func TestENOSPC(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "16MiB")
	const fileSize = 1 << 20
	const chunk = 64 << 10

	type written struct {
		path string
		data []byte
	}
	var files []written
	var lastErr error
	var partial written
	for i := 0; lastErr == nil && i < 64; i++ {
		p := fs.Path("f" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		data := randBytes(uint64(i), fileSize)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		must(t, err)
		n := 0
		for n < len(data) {
			k, err := f.Write(data[n:min(n+chunk, len(data))])
			n += k
			if err != nil {
				lastErr = err
				break
			}
		}
		if err := f.Close(); err != nil && lastErr == nil {
			lastErr = err
		}
		if lastErr == nil {
			files = append(files, written{p, data})
		} else {
			partial = written{p, data[:n]}
		}
	}
	if lastErr == nil {
		t.Fatalf("wrote %d MiB into a 16 MiB pool without an error", len(files))
	}
	wantErrno(t, "write into a full pool", lastErr, unix.ENOSPC)
	if len(files) < 10 {
		t.Errorf("only %d MiB fit into a 16 MiB pool", len(files))
	}
	t.Logf("pool full after %d MiB + %d bytes: %v", len(files), len(partial.data), lastErr)

	// Everything written before is intact; the partly written file holds
	// exactly the bytes whose write succeeded.
	check := func(when string) {
		t.Helper()
		for _, w := range files {
			got, err := os.ReadFile(w.path)
			if err != nil {
				t.Errorf("%s: %v", when, err)
				continue
			}
			wantBytes(t, when+": "+w.path, got, w.data)
		}
	}
	check("after ENOSPC")
	got, err := os.ReadFile(partial.path)
	must(t, err)
	wantBytes(t, "file whose write failed", got, partial.data)

	// Still full: a new small write fails the same way.
	werr := os.WriteFile(fs.Path("probe"), make([]byte, 256<<10), 0o644)
	wantErrno(t, "256 KiB write into a full pool", werr, unix.ENOSPC)
	if err := os.Remove(fs.Path("probe")); err != nil && !os.IsNotExist(err) {
		t.Error(err)
	}

	// Deleting a file frees its space; a new write then succeeds.
	before := statfs(t, fs.Mnt)
	must(t, os.Remove(files[0].path))
	must(t, os.Remove(partial.path))
	files = files[1:]
	// Written at once: the space comes back when the kernel forgets the
	// inodes (FORGET follows unlink asynchronously), and an allocation
	// that fails meanwhile waits for them (pool.RetryNoSpace).
	fresh := written{fs.Path("fresh"), randBytes(1000, fileSize)}
	if err := os.WriteFile(fresh.path, fresh.data, 0o644); err != nil {
		t.Fatalf("write right after deleting files in a full pool: %v", err)
	}
	var after unix.Statfs_t
	if !eventually(func() bool { after = statfs(t, fs.Mnt); return after.Bfree >= before.Bfree }) {
		t.Errorf("statfs free blocks %d -> %d after deleting a 1 MiB file and writing another", before.Bfree, after.Bfree)
	}
	files = append(files, fresh)
	check("after freeing space")

	fs.Unmount(t)
	if out, code := harness.Fsck(t, fs.Pool); code != 0 {
		t.Fatalf("fsck after ENOSPC: exit %d\n%s", code, out)
	}
	fs = fs.Remount(t)
	check("after remount")
}

// TestPermissions checks the permission checks a non-root caller gets
// (the mount uses default_permissions, and --allow-other lets other users
// in at all).
func TestPermissions(t *testing.T) {
	t.Parallel()
	const nobody = 65534
	fs := newFS(t, "32MiB", "--allow-other")
	makeReachable(t, fs.Mnt)

	private := fs.Path("private")
	must(t, os.Mkdir(private, 0o700))
	secret := filepath.Join(private, "secret")
	writeFile(t, secret, []byte("TOP-SECRET-CONTENT\n"), 0o644)
	public := fs.Path("public")
	writeFile(t, public, []byte("public\n"), 0o644)
	must(t, os.Chmod(public, 0o644)) // no umask surprises
	mine := fs.Path("mine")
	writeFile(t, mine, []byte("mine\n"), 0o644)
	must(t, os.Chown(mine, nobody, nobody))

	// The mount is reachable at all: a positive control for everything below.
	if out, code := shellAs(t, nobody, nobody, "cat "+public); code != 0 || out != "public\n" {
		t.Fatalf("uid %d: cat %s: exit %d, output %q; want the contents (is --allow-other in effect?)", nobody, public, code, out)
	}

	t.Run("0700 dir", func(t *testing.T) {
		out, code := shellAs(t, nobody, nobody, "cat "+secret)
		if code == 0 || !strings.Contains(out, "Permission denied") {
			t.Errorf("uid %d: cat %s: exit %d, output %q; want Permission denied", nobody, secret, code, out)
		}
		if strings.Contains(out, "TOP-SECRET") {
			t.Errorf("uid %d read the secret: %q", nobody, out)
		}
		wantErrno(t, "open file in a 0700 dir", errnoOrNil(asUserErrno(t, nobody, nobody, "read", secret)), unix.EACCES)
		wantErrno(t, "stat file in a 0700 dir", errnoOrNil(asUserErrno(t, nobody, nobody, "stat", secret)), unix.EACCES)
		wantErrno(t, "readdir a 0700 dir", errnoOrNil(asUserErrno(t, nobody, nobody, "readdir", private)), unix.EACCES)
		wantErrno(t, "create in a 0700 dir", errnoOrNil(asUserErrno(t, nobody, nobody, "create", filepath.Join(private, "new"))), unix.EACCES)
	})

	t.Run("0644 file", func(t *testing.T) {
		ok, e, digest := asUser(t, nobody, nobody, "read", public)
		if !ok || digest != sha([]byte("public\n")) {
			t.Errorf("uid %d reading a 0644 file: ok=%v errno=%s", nobody, ok, errnoName(e))
		}
		wantErrno(t, "open 0644 root file for writing", errnoOrNil(asUserErrno(t, nobody, nobody, "open-write", public)), unix.EACCES)
		wantErrno(t, "append to 0644 root file", errnoOrNil(asUserErrno(t, nobody, nobody, "append", public)), unix.EACCES)
		out, code := shellAs(t, nobody, nobody, "echo more >> "+public)
		if code == 0 || !strings.Contains(out, "Permission denied") {
			t.Errorf("uid %d: echo >> %s: exit %d, output %q; want Permission denied", nobody, public, code, out)
		}
		wantErrno(t, "unlink in root-owned 0755 dir", errnoOrNil(asUserErrno(t, nobody, nobody, "unlink", public)), unix.EACCES)
		wantErrno(t, "create in root-owned 0755 dir", errnoOrNil(asUserErrno(t, nobody, nobody, "create", fs.Path("new"))), unix.EACCES)
		wantBytes(t, "0644 file after the refused writes", readFile(t, public), []byte("public\n"))
		// Positive control: its own file is writable.
		if e := asUserErrno(t, nobody, nobody, "append", mine); e != 0 {
			t.Errorf("uid %d appending to its own file: %s", nobody, errnoName(e))
		}
	})

	t.Run("chmod by non-owner", func(t *testing.T) {
		wantErrno(t, "chmod of a root file by uid 65534", errnoOrNil(asUserErrno(t, nobody, nobody, "chmod", public, "777")), unix.EPERM)
		out, code := shellAs(t, nobody, nobody, "chmod 777 "+public)
		if code == 0 || !strings.Contains(out, "Operation not permitted") {
			t.Errorf("uid %d: chmod 777 %s: exit %d, output %q; want Operation not permitted", nobody, public, code, out)
		}
		if st := lstat(t, public); st.Mode&0o7777 != 0o644 {
			t.Errorf("mode after the refused chmod: %04o, want 0644", st.Mode&0o7777)
		}
		wantErrno(t, "setxattr user.* on a root file by uid 65534", errnoOrNil(asUserErrno(t, nobody, nobody, "setxattr", public)), unix.EACCES)
		// Positive control: the owner may chmod.
		if e := asUserErrno(t, nobody, nobody, "chmod", mine, "600"); e != 0 {
			t.Errorf("uid %d chmod of its own file: %s", nobody, errnoName(e))
		}
		if st := lstat(t, mine); st.Mode&0o7777 != 0o600 {
			t.Errorf("mode after the owner's chmod: %04o, want 0600", st.Mode&0o7777)
		}
	})
}

// errnoOrNil turns an errno (0 = success) back into an error for wantErrno.
func errnoOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
