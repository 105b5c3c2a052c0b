package e2e_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nodevTmpfs mounts a private tmpfs with nodev,nosuid: the flags of a
// dnnfs mount with --nodev --nosuid, so device nodes on it behave alike.
func nodevTmpfs(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs-nodev")
	must(t, os.Mkdir(dir, 0o755))
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=0755,size=16m"); err != nil {
		t.Skipf("cannot mount a nodev tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// specialNode is what a test compares of a FIFO, socket or device node.
type specialNode struct {
	name  string
	mode  uint32 // type and permissions
	rdev  uint64
	size  int64
	nlink uint64
	dtype os.FileMode // type bits readdir reports
}

// makeSpecials makes one node of every special type in dir: a unix socket
// by bind(2) (and checks that it carries data), the others by mknod(2).
func makeSpecials(t *testing.T, dir string) {
	t.Helper()
	must(t, retry(func() error { return unix.Mkfifo(filepath.Join(dir, "fifo"), 0o640) }))
	must(t, retry(func() error { return unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o620, int(unix.Mkdev(1, 3))) }))
	must(t, retry(func() error {
		return unix.Mknod(filepath.Join(dir, "loop"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 200)))
	}))
	must(t, retry(func() error {
		return unix.Mknod(filepath.Join(dir, "bigdev"), unix.S_IFCHR|0o600, int(unix.Mkdev(300, 70000)))
	}))
	must(t, retry(func() error { return unix.Mknod(filepath.Join(dir, "mksock"), unix.S_IFSOCK|0o600, 0) }))
	unixSocket(t, dir, "sock")
}

// unixSocket binds a unix socket named name in dir, sends bytes through it
// and closes it, leaving the socket file. The path goes through
// /proc/self/fd so that it fits sun_path whatever the mount point is.
func unixSocket(t *testing.T, dir, name string) {
	t.Helper()
	d, err := os.Open(dir)
	must(t, err)
	defer d.Close()
	l, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name))
	if err != nil {
		t.Fatalf("bind a unix socket in %s: %v", dir, err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	defer l.Close()
	done := make(chan []byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- nil
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		done <- b
	}()
	c, err := net.Dial("unix", l.Addr().String())
	must(t, err)
	_, err = c.Write([]byte("over the socket"))
	c.Close()
	must(t, err)
	if b := <-done; string(b) != "over the socket" {
		t.Errorf("socket %s in %s carried %q", name, dir, b)
	}
}

func readSpecials(t *testing.T, dir string) []specialNode {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	var out []specialNode
	for _, e := range ents {
		if e.IsDir() {
			continue // sizes differ by design
		}
		st := lstat(t, filepath.Join(dir, e.Name()))
		out = append(out, specialNode{name: e.Name(), mode: st.Mode, rdev: st.Rdev, size: st.Size, nlink: st.Nlink, dtype: e.Type()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// TestSpecialFiles: FIFOs, sockets and device nodes exist on dnnfs as on
// tmpfs: same stat (type, permissions, rdev, size, links), same readdir
// types, they rename, link and unlink, survive a remount, and a FIFO and a
// socket carry data between processes. Device nodes cannot be opened on a
// nodev mount (EACCES from the kernel, as on a nodev tmpfs; a mount by
// root without --nodev opens them: TestDeviceNodesOpen).
func TestSpecialFiles(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64m", "--nodev", "--nosuid")
	ref := nodevTmpfs(t)
	d := fs.Path("dev")
	must(t, os.Mkdir(d, 0o755))
	makeSpecials(t, d)
	makeSpecials(t, ref)

	got, want := readSpecials(t, d), readSpecials(t, ref)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("special files on dnnfs:\n %+v\ntmpfs:\n %+v", got, want)
	}
	if st := lstat(t, filepath.Join(d, "bigdev")); unix.Major(st.Rdev) != 300 || unix.Minor(st.Rdev) != 70000 {
		t.Errorf("bigdev rdev %d:%d, want 300:70000", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}

	t.Run("open", func(t *testing.T) {
		for _, name := range []string{"null", "loop", "mksock", "sock"} {
			fdD, errD := retryN(func() (int, error) {
				return unix.Open(filepath.Join(d, name), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			})
			fdR, errR := retryN(func() (int, error) {
				return unix.Open(filepath.Join(ref, name), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			})
			for _, fd := range []int{fdD, fdR} {
				if fd >= 0 {
					unix.Close(fd)
				}
			}
			if errnoOf(errD) != errnoOf(errR) || errD == nil {
				t.Errorf("open %s: dnnfs %s, nodev tmpfs %s (want the same error)", name, errnoName(errnoOf(errD)), errnoName(errnoOf(errR)))
			}
		}
		wantErrno(t, "truncate of a FIFO", unix.Truncate(filepath.Join(d, "fifo"), 0), unix.EINVAL)
	})

	t.Run("fifo between processes", func(t *testing.T) {
		fifo := filepath.Join(d, "fifo")
		cat := exec.Command("cat", fifo)
		var out bytes.Buffer
		cat.Stdout = &out
		must(t, cat.Start())
		catDone := make(chan error, 1)
		go func() { catDone <- cat.Wait() }()
		// Non-blocking open: ENXIO until cat has the read end, so a cat
		// that fails cannot leave the test blocked in open.
		var w *os.File
		for {
			var err error
			if w, err = os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				break
			}
			if !errors.Is(err, unix.ENXIO) {
				cat.Process.Kill()
				t.Fatalf("open the FIFO for writing: %v (cat: %v)", err, <-catDone)
			}
			select {
			case err := <-catDone:
				t.Fatalf("cat exited before opening the FIFO: %v", err)
			case <-time.After(time.Millisecond):
			}
		}
		msg := bytes.Repeat([]byte("through the pipe\n"), 10000) // more than a pipe buffer
		_, err := w.Write(msg)
		w.Close()
		must(t, err)
		if err := <-catDone; err != nil {
			t.Fatalf("cat %s: %v", fifo, err)
		}
		wantBytes(t, "bytes read from the FIFO", out.Bytes(), msg)
		if st := lstat(t, fifo); st.Size != 0 || st.Blocks != 0 {
			t.Errorf("FIFO after use: size %d, %d blocks", st.Size, st.Blocks)
		}
	})

	t.Run("rename link unlink", func(t *testing.T) {
		for _, root := range []string{d, ref} {
			must(t, rename(filepath.Join(root, "null"), filepath.Join(root, "null2")))
			must(t, os.Link(filepath.Join(root, "fifo"), filepath.Join(root, "fifo-link")))
			must(t, os.Mkdir(filepath.Join(root, "sub"), 0o755))
			must(t, rename(filepath.Join(root, "loop"), filepath.Join(root, "sub", "loop")))
			must(t, os.Remove(filepath.Join(root, "mksock")))
		}
		if got, want := readSpecials(t, d), readSpecials(t, ref); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("after rename/link/unlink, dnnfs:\n %+v\ntmpfs:\n %+v", got, want)
		}
		if a, b := lstat(t, filepath.Join(d, "sub", "loop")), lstat(t, filepath.Join(ref, "sub", "loop")); a.Mode != b.Mode || a.Rdev != b.Rdev {
			t.Errorf("moved block device: dnnfs mode %#o rdev %#x, tmpfs %#o %#x", a.Mode, a.Rdev, b.Mode, b.Rdev)
		}
	})

	// Persistence: everything above is on media (fsck of the pool runs at
	// the end of the test).
	before := readSpecials(t, d)
	fs.Remount(t)
	if after := readSpecials(t, d); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("after remount:\n %+v\nbefore:\n %+v", after, before)
	}
	if st := lstat(t, filepath.Join(d, "sub", "loop")); st.Mode != unix.S_IFBLK|0o600 || st.Rdev != unix.Mkdev(7, 200) {
		t.Errorf("block device after remount: mode %#o rdev %#x", st.Mode, st.Rdev)
	}
}
