package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// listXattrs returns the sorted attribute names of path (not following a
// final symlink).
func listXattrs(t testing.TB, path string) []string {
	t.Helper()
	n, err := retryN(func() (int, error) { return unix.Llistxattr(path, nil) })
	if err != nil {
		t.Fatalf("llistxattr %s: %v", path, err)
	}
	buf := make([]byte, n)
	n, err = retryN(func() (int, error) { return unix.Llistxattr(path, buf) })
	if err != nil {
		t.Fatalf("llistxattr %s: %v", path, err)
	}
	var names []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	sort.Strings(names)
	return names
}

// getXattr returns the value of name on path (not following a final
// symlink).
func getXattr(path, name string) ([]byte, error) {
	n, err := retryN(func() (int, error) { return unix.Lgetxattr(path, name, nil) })
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	n, err = retryN(func() (int, error) { return unix.Lgetxattr(path, name, buf) })
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func userXattrs(t testing.TB, path string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, name := range listXattrs(t, path) {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		v, err := getXattr(path, name)
		if err != nil {
			t.Fatalf("lgetxattr %s %s: %v", path, name, err)
		}
		m[name] = string(v)
	}
	return m
}

func TestXattr(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")

	t.Run("set get list remove", func(t *testing.T) {
		f := fs.Path("f")
		writeFile(t, f, []byte("data"), 0o644)
		if got := userXattrs(t, f); len(got) != 0 {
			t.Errorf("new file has xattrs %v", got)
		}
		want := map[string]string{
			"user.a":                           "1",
			"user.empty":                       "",
			"user.binary":                      "\x00\x01\xff\x00",
			"user." + strings.Repeat("n", 250): "longest name",
		}
		for k, v := range want {
			must(t, unix.Setxattr(f, k, []byte(v), 0))
		}
		if got := userXattrs(t, f); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("xattrs %v, want %v", got, want)
		}
		// Overwrite with a longer and then a shorter value.
		must(t, unix.Setxattr(f, "user.a", bytes.Repeat([]byte("L"), 5000), 0))
		must(t, unix.Setxattr(f, "user.a", []byte("2"), 0))
		want["user.a"] = "2"
		must(t, unix.Removexattr(f, "user.binary"))
		delete(want, "user.binary")
		if got := userXattrs(t, f); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("after overwrite and remove: %v, want %v", got, want)
		}
		_, err := getXattr(f, "user.binary")
		wantErrno(t, "getxattr removed attribute", err, unix.ENODATA)
		wantErrno(t, "removexattr twice", unix.Removexattr(f, "user.binary"), unix.ENODATA)
		wantErrno(t, "setxattr with a 256-byte name", unix.Setxattr(f, "user."+strings.Repeat("n", 251), []byte("x"), 0), unix.ERANGE)
		wantBytes(t, "file contents after xattr changes", readFile(t, f), []byte("data"))
	})

	t.Run("create and replace flags", func(t *testing.T) {
		f := fs.Path("flags")
		writeFile(t, f, nil, 0o644)
		wantErrno(t, "XATTR_REPLACE of a missing attribute", unix.Setxattr(f, "user.x", []byte("r"), unix.XATTR_REPLACE), unix.ENODATA)
		if _, err := getXattr(f, "user.x"); errnoOf(err) != unix.ENODATA {
			t.Errorf("failed XATTR_REPLACE created the attribute (err=%v)", err)
		}
		must(t, unix.Setxattr(f, "user.x", []byte("created"), unix.XATTR_CREATE))
		wantErrno(t, "XATTR_CREATE of an existing attribute", unix.Setxattr(f, "user.x", []byte("again"), unix.XATTR_CREATE), unix.EEXIST)
		if v, err := getXattr(f, "user.x"); err != nil || string(v) != "created" {
			t.Errorf("after the refused XATTR_CREATE: %q, %v", v, err)
		}
		must(t, unix.Setxattr(f, "user.x", []byte("replaced"), unix.XATTR_REPLACE))
		if v, err := getXattr(f, "user.x"); err != nil || string(v) != "replaced" {
			t.Errorf("after XATTR_REPLACE: %q, %v", v, err)
		}
	})

	// Observed on dnnfs and on tmpfs: a 65535- and a 65536-byte value
	// work; 70000 bytes is E2BIG (the kernel's XATTR_SIZE_MAX is 65536).
	// dnnfs keeps all of an inode's xattrs in one region of at most 17
	// blocks: a second 65535-byte value does not fit.
	t.Run("large values", func(t *testing.T) {
		f := fs.Path("large")
		writeFile(t, f, nil, 0o644)
		big := randBytes(61, 65535)
		must(t, unix.Setxattr(f, "user.big", big, 0))
		v, err := getXattr(f, "user.big")
		must(t, err)
		wantBytes(t, "65535-byte value", v, big)
		n, err := unix.Getxattr(f, "user.big", nil)
		if err != nil || n != len(big) {
			t.Errorf("size query of the 65535-byte value: %d, %v", n, err)
		}
		wantErrno(t, "70000-byte value", unix.Setxattr(f, "user.huge", make([]byte, 70000), 0), unix.E2BIG)
		if _, err := getXattr(f, "user.huge"); errnoOf(err) != unix.ENODATA {
			t.Errorf("refused 70000-byte value left an attribute (err=%v)", err)
		}
		err = unix.Setxattr(f, "user.big2", big, 0)
		switch errnoOf(err) {
		case 0:
			t.Logf("a second 65535-byte xattr fits")
		case unix.ENOSPC, unix.E2BIG:
			t.Logf("a second 65535-byte xattr: %v", err)
		default:
			t.Errorf("second 65535-byte xattr: %v, want success, ENOSPC or E2BIG", err)
		}
		v, err = getXattr(f, "user.big")
		must(t, err)
		wantBytes(t, "first 65535-byte value after adding a second", v, big)
	})

	t.Run("65536-byte value", func(t *testing.T) {
		// tmpfs and ext4 accept XATTR_SIZE_MAX (see also TestXattrLimits).
		f := fs.Path("max")
		writeFile(t, f, nil, 0o644)
		must(t, unix.Setxattr(f, "user.max", make([]byte, 65536), 0))
		v, err := getXattr(f, "user.max")
		if err != nil || len(v) != 65536 {
			t.Errorf("65536-byte value reads back as %d bytes, %v", len(v), err)
		}
	})

	t.Run("directories and symlinks", func(t *testing.T) {
		ref := tmpfsDir(t)
		for _, root := range []string{fs.Path("links"), ref} {
			if root != ref {
				must(t, os.Mkdir(root, 0o755))
			}
			writeFile(t, filepath.Join(root, "target"), nil, 0o644)
			must(t, os.Symlink("target", filepath.Join(root, "link")))
			must(t, os.Mkdir(filepath.Join(root, "dir"), 0o755))
		}
		type result struct {
			errno unix.Errno
			val   string
		}
		ops := []struct {
			name string
			fn   func(root string) result
		}{
			{"lsetxattr user.* on a symlink", func(r string) result {
				return result{errnoOf(unix.Lsetxattr(filepath.Join(r, "link"), "user.l", []byte("v"), 0)), ""}
			}},
			{"lgetxattr user.* on a symlink", func(r string) result {
				v, err := getXattr(filepath.Join(r, "link"), "user.l")
				return result{errnoOf(err), string(v)}
			}},
			{"lremovexattr user.* on a symlink", func(r string) result {
				return result{errnoOf(unix.Lremovexattr(filepath.Join(r, "link"), "user.l")), ""}
			}},
			{"setxattr through a symlink", func(r string) result {
				return result{errnoOf(unix.Setxattr(filepath.Join(r, "link"), "user.via", []byte("through"), 0)), ""}
			}},
			{"target's xattr set through the symlink", func(r string) result {
				v, err := getXattr(filepath.Join(r, "target"), "user.via")
				return result{errnoOf(err), string(v)}
			}},
			{"lsetxattr trusted.* on a symlink", func(r string) result {
				return result{errnoOf(unix.Lsetxattr(filepath.Join(r, "link"), "trusted.t", []byte("tv"), 0)), ""}
			}},
			{"lgetxattr trusted.* on a symlink", func(r string) result {
				v, err := getXattr(filepath.Join(r, "link"), "trusted.t")
				return result{errnoOf(err), string(v)}
			}},
			{"setxattr user.* on a directory", func(r string) result {
				return result{errnoOf(unix.Setxattr(filepath.Join(r, "dir"), "user.d", []byte("dv"), 0)), ""}
			}},
			{"getxattr user.* on a directory", func(r string) result {
				v, err := getXattr(filepath.Join(r, "dir"), "user.d")
				return result{errnoOf(err), string(v)}
			}},
			{"setxattr XATTR_CREATE on a directory, existing", func(r string) result {
				return result{errnoOf(unix.Setxattr(filepath.Join(r, "dir"), "user.d", []byte("x"), unix.XATTR_CREATE)), ""}
			}},
			{"removexattr on a directory", func(r string) result {
				return result{errnoOf(unix.Removexattr(filepath.Join(r, "dir"), "user.d")), ""}
			}},
			{"getxattr removed on a directory", func(r string) result {
				v, err := getXattr(filepath.Join(r, "dir"), "user.d")
				return result{errnoOf(err), string(v)}
			}},
		}
		for _, op := range ops {
			want, got := op.fn(ref), op.fn(fs.Path("links"))
			if got != want {
				t.Errorf("%s: dnnfs gives %s %q, tmpfs %s %q", op.name, errnoName(got.errno), got.val, errnoName(want.errno), want.val)
			}
		}
		// The kernel rule, stated: user.* xattrs are not allowed on symlinks.
		wantErrno(t, "lsetxattr user.* on a dnnfs symlink", unix.Lsetxattr(fs.Path("links", "link"), "user.l", []byte("v"), 0), unix.EPERM)
		must(t, unix.Setxattr(fs.Path("links", "dir"), "user.keep", []byte("dir value"), 0))
	})

	// Everything above survives an unmount and a remount.
	snapshot := func() map[string]map[string]string {
		out := map[string]map[string]string{}
		for _, p := range []string{"f", "flags", "large", "links/target", "links/dir", "links/link"} {
			out[p] = userXattrs(t, fs.Path(p))
		}
		return out
	}
	before := snapshot()
	if before["links/dir"]["user.keep"] != "dir value" || before["flags"]["user.x"] != "replaced" {
		t.Fatalf("unexpected xattrs before remount: %v", before)
	}
	fs.Unmount(t)
	fs = fs.Remount(t)
	after := snapshot()
	for p, m := range before {
		if fmt.Sprint(after[p]) != fmt.Sprint(m) {
			t.Errorf("%s: xattrs after remount differ:\n got %.300v\nwant %.300v", p, after[p], m)
		}
	}
}
