package e2e_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// Commands that fail, or only read, never write the pool.

// emptyDir fails t unless dir exists and holds nothing.
func emptyDir(t *testing.T, what, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v after a failed mount, want nothing", what, names)
	}
}

// runChild runs the dnnfs binary with args in a new process and returns
// its output, exit code and peak RSS in bytes. userNS runs it in a new user
// namespace (no CAP_SYS_ADMIN over this mount namespace: the FUSE mount
// fails, while the files it opens are still its own).
func runChild(t *testing.T, userNS bool, args ...string) (stdout, stderr string, code int, maxRSS int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), harness.RunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Binary(t), args...)
	var outBuf, errBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &errBuf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if userNS {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER
	}
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("dnnfs %s timed out", strings.Join(args, " "))
	}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("dnnfs %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		maxRSS = ru.Maxrss << 10
	}
	return outBuf.String(), errBuf.String(), code, maxRSS
}

// TestFailedMountWritesNothing: a mount that fails after opening the pool
// (an SSD directory missing or of another pool, the FUSE mount refused)
// leaves the pool byte-identical and the SSD directories as they were: no
// device is registered or labelled. Missing or busy mountpoints and bad
// flags are covered by TestCLI.
func TestFailedMountWritesNothing(t *testing.T) {
	t.Parallel()
	// A pool that was mounted before, with a file, cleanly unmounted.
	pool := harness.Mkfs(t, "32MiB")
	fs := harness.Mount(t, pool)
	writeFile(t, fs.Path("f"), []byte("kept"), 0o644)
	fs.Unmount(t)
	// An SSD directory labelled by another pool.
	other := harness.Mkfs(t, "16MiB")
	foreign := t.TempDir()
	ofs := harness.Mount(t, other, "--ssd", foreign)
	ofs.Unmount(t)

	fresh := t.TempDir()
	missing := filepath.Join(t.TempDir(), "missing")

	t.Run("missing --ssd directory after a good one", func(t *testing.T) {
		badRun(t, pool, []int{1}, "mount", "--pool", pool, "--ssd", fresh, "--ssd", missing, mountDir(t))
		emptyDir(t, "the good --ssd directory", fresh)
	})
	t.Run("--ssd directory of another pool after a new one", func(t *testing.T) {
		msg := badRun(t, pool, []int{1}, "mount", "--pool", pool, "--ssd", fresh, "--ssd", foreign, mountDir(t))
		if !strings.Contains(msg, "belongs to another pool") {
			t.Errorf("stderr %q does not say the directory belongs to another pool", msg)
		}
		emptyDir(t, "the new --ssd directory", fresh)
	})
	t.Run("FUSE mount refused", func(t *testing.T) {
		for _, args := range [][]string{
			{"mount", "--pool", pool, mountDir(t)},
			{"mount", "--pool", pool, "--ssd", fresh, mountDir(t)},
		} {
			before := hashFile(t, pool)
			_, stderr, code, _ := runChild(t, true, args...)
			what := "dnnfs " + strings.Join(args, " ") + " in a user namespace"
			if code != 1 {
				t.Errorf("%s: exit %d, want 1\n%s", what, code, stderr)
			}
			wantOneLine(t, what, stderr)
			if hashFile(t, pool) != before {
				t.Errorf("%s changed the pool file", what)
			}
			emptyDir(t, "the --ssd directory", fresh)
		}
	})

	// The pool still mounts, with the new directory registered then.
	fs = harness.Mount(t, pool, "--ssd", fresh)
	wantBytes(t, "file after the failed mounts", readFile(t, fs.Path("f")), []byte("kept"))
	fs.Unmount(t)
	if _, err := os.Stat(filepath.Join(fresh, "dnnfs-tier.dat")); err != nil {
		t.Errorf("the SSD directory after a good mount: %v", err)
	}
}

// readOnlyDir bind-mounts dir read-only at a new path and returns it: not
// even root can write there (EROFS).
func readOnlyDir(t *testing.T, dir string) string {
	t.Helper()
	ro := filepath.Join(t.TempDir(), "ro")
	must(t, os.Mkdir(ro, 0o755))
	if err := unix.Mount(dir, ro, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(ro, 0); err != nil {
			_ = unix.Unmount(ro, unix.MNT_DETACH)
		}
	})
	if err := unix.Mount("", ro, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Skipf("cannot make the bind mount read-only: %v", err)
	}
	return ro
}

// TestReadOnlyCommandsOnReadOnlyPool: fsck without --repair and recover
// without --finish/--abandon work on a 0444 pool file on a read-only
// mount (a pool left by a crash, with an orphan, so that recovery has work
// to do) and leave it byte-identical; --finish and --repair there fail
// with one line. The next mount then recovers the pool as usual.
func TestReadOnlyCommandsOnReadOnlyPool(t *testing.T) {
	t.Parallel()
	pool := harness.Mkfs(t, "32MiB")
	fs := harness.Mount(t, pool)
	writeFileSync(t, fs.Path("kept"), randBytes(5, 300<<10), 0o644)
	fd := openFd(t, fs.Path("orphan"), unix.O_RDWR|unix.O_CREAT, 0o644)
	pwriteFull(t, fd, randBytes(6, 200<<10), 0)
	must(t, unix.Fsync(fd))
	must(t, os.Remove(fs.Path("orphan")))
	fs.Kill(t)     // the unlinked, still open file is an orphan
	unix.Close(fd) // ENOTCONN: the daemon is gone

	must(t, os.Chmod(pool, 0o444))
	ro := filepath.Join(readOnlyDir(t, filepath.Dir(pool)), filepath.Base(pool))
	before := hashFile(t, ro)

	out, code := harness.Fsck(t, ro)
	if code != 0 || !strings.Contains(out, "orphan") {
		t.Errorf("fsck of the read-only pool: exit %d, want 0 with a note on the orphan\n%s", code, out)
	}
	stdout, stderr, code := harness.Run(t, "recover", "--pool", ro)
	if code != 0 || !strings.Contains(stdout, "no open sessions") {
		t.Errorf("recover of the read-only pool: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if hashFile(t, ro) != before {
		t.Fatal("fsck or recover changed the pool")
	}
	badRun(t, ro, []int{1}, "recover", "--pool", ro, "--finish", "/kept")
	badRun(t, ro, []int{2}, "fsck", "--pool", ro, "--repair")

	// Writable again, the next mount recovers it (the cleanup's fsck must
	// then find it clean).
	must(t, os.Chmod(pool, 0o600))
	fs = fs.Remount(t)
	wantBytes(t, "kept after recovery", readFile(t, fs.Path("kept")), randBytes(5, 300<<10))
	fs.Unmount(t)
}

// TestFsckPoolLargerThanRAM: fsck and recover of a 64 GiB sparse pool
// (more than this machine's RAM on CI) map it without a private copy; the
// peak RSS bound proves no copy of the mapping was made.
func TestFsckPoolLargerThanRAM(t *testing.T) {
	t.Parallel()
	pool := filepath.Join(t.TempDir(), "pool")
	stdout, stderr, code := harness.Run(t, "mkfs", "--pool", pool, "--size", "64GiB")
	if code != 0 {
		t.Skipf("cannot make a 64 GiB sparse pool here: %s%s", stdout, stderr)
	}
	// Hashing 64 GiB of holes would take minutes: compare the non-zero
	// pages instead (a hole and a page of zeros read the same).
	before := hashNonZero(t, pool)
	const bound = 4 << 30
	for _, args := range [][]string{{"fsck", "--pool", pool}, {"recover", "--pool", pool}} {
		stdout, stderr, code, rss := runChild(t, false, args...)
		what := "dnnfs " + strings.Join(args, " ")
		t.Logf("%s: exit %d, peak RSS %d MiB", what, code, rss>>20)
		if code != 0 {
			t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s", what, code, stdout, stderr)
		}
		if rss >= bound {
			t.Errorf("%s: peak RSS %d MiB, want under %d MiB (no private copy of the pool)", what, rss>>20, bound>>20)
		}
	}
	if hashNonZero(t, pool) != before {
		t.Error("fsck or recover changed the pool")
	}
}

// hashNonZero hashes the size of the file at path and the offset and
// bytes of each of its non-zero pages, skipping holes (SEEK_DATA).
func hashNonZero(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	st, err := f.Stat()
	must(t, err)
	h := sha256.New()
	fmt.Fprintf(h, "size %d\n", st.Size())
	buf := make([]byte, 1<<20)
	var zero [4096]byte
	for off := int64(0); off < st.Size(); {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break
		}
		must(t, err)
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		must(t, err)
		for off = data; off < hole; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), hole-off)], off)
			if n == 0 {
				t.Fatalf("reading %s at %d: %v", path, off, err)
			}
			for i := 0; i < n; i += len(zero) {
				page := buf[i:min(i+len(zero), n)]
				if !bytes.Equal(page, zero[:len(page)]) {
					fmt.Fprintf(h, "%d\n", off+int64(i))
					h.Write(page)
				}
			}
			off += int64(n)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestFailedMkfsLeavesNoFile: mkfs that fails creates nothing, and never
// removes or empties a file it did not create.
func TestFailedMkfsLeavesNoFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Too large to map in this process (and, on most file systems, larger
	// than a file may be).
	const huge = "200TiB"
	// (badRun gets no pool to hash: a file left behind may be huge.)
	p := filepath.Join(dir, "new")
	badRun(t, "", []int{1}, "mkfs", "--pool", p, "--size", huge)
	if st, err := os.Lstat(p); err == nil {
		t.Errorf("a failed mkfs left %s behind (%d bytes)", p, st.Size())
	}
	// An existing file, even with --force, keeps its bytes.
	keep := filepath.Join(dir, "keep")
	data := []byte("someone's data")
	writeFile(t, keep, data, 0o600)
	badRun(t, "", []int{1}, "mkfs", "--pool", keep, "--size", huge, "--force")
	if st, err := os.Stat(keep); err != nil || st.Size() != int64(len(data)) {
		t.Errorf("the existing file after a failed mkfs --force: %v, want %d bytes", err, len(data))
	} else {
		wantBytes(t, "the existing file after a failed mkfs --force", readFile(t, keep), data)
	}
	// A directory is named as such and stays.
	sub := filepath.Join(dir, "sub")
	must(t, os.Mkdir(sub, 0o755))
	for _, force := range []bool{false, true} {
		args := []string{"mkfs", "--pool", sub, "--size", "16MiB"}
		if force {
			args = append(args, "--force")
		}
		msg := badRun(t, "", []int{1}, args...)
		if !strings.Contains(msg, "directory") {
			t.Errorf("dnnfs %s: stderr %q does not say it is a directory", strings.Join(args, " "), msg)
		}
		if st, err := os.Stat(sub); err != nil || !st.IsDir() {
			t.Errorf("the directory after mkfs: %v", err)
		}
	}
	ents, err := os.ReadDir(dir)
	must(t, err)
	if len(ents) != 2 {
		t.Errorf("%s holds %d entries after the failed mkfs runs, want 2 (keep, sub)", dir, len(ents))
	}
}

// TestReadOnlyMount: `dnnfs mount --read-only` (-o ro) serves the pool
// without writing one byte of it: reads work and update no access time,
// every change fails with EROFS, and a pool left dirty by a crash is
// recovered in memory only (the next read-write mount recovers it for
// real).
func TestReadOnlyMount(t *testing.T) {
	t.Parallel()
	pool := harness.Mkfs(t, "32MiB")
	fs := harness.Mount(t, pool)
	writeFile(t, fs.Path("f"), []byte("kept"), 0o644)
	must(t, os.Mkdir(fs.Path("d"), 0o755))
	fs.Unmount(t)

	check := func(t *testing.T, want map[string]string) {
		before := hashFile(t, pool)
		ro := harness.Mount(t, pool, "--read-only")
		for name, data := range want {
			var st0, st1 unix.Stat_t
			must(t, unix.Stat(ro.Path(name), &st0))
			if got := string(readFile(t, ro.Path(name))); got != data {
				t.Errorf("%s reads %q, want %q", name, got, data)
			}
			must(t, unix.Stat(ro.Path(name), &st1))
			if st1.Atim != st0.Atim {
				t.Errorf("%s: a read on a read-only mount changed the access time", name)
			}
		}
		for what, err := range map[string]error{
			"open for writing": func() error {
				f, err := os.OpenFile(ro.Path("f"), os.O_WRONLY, 0)
				if err == nil {
					f.Close()
				}
				return err
			}(),
			"create":   os.WriteFile(ro.Path("new"), nil, 0o644),
			"mkdir":    os.Mkdir(ro.Path("d2"), 0o755),
			"unlink":   os.Remove(ro.Path("f")),
			"rename":   os.Rename(ro.Path("f"), ro.Path("g")),
			"chmod":    os.Chmod(ro.Path("f"), 0o600),
			"setxattr": unix.Setxattr(ro.Path("f"), "user.x", []byte("v"), 0),
			"truncate": os.Truncate(ro.Path("f"), 0),
		} {
			if !errors.Is(err, unix.EROFS) {
				t.Errorf("%s on a read-only mount: %v, want EROFS", what, err)
			}
		}
		ro.Unmount(t)
		if hashFile(t, pool) != before {
			t.Error("a read-only mount changed the pool file")
		}
	}
	t.Run("clean pool", func(t *testing.T) { check(t, map[string]string{"f": "kept"}) })
	t.Run("pool left dirty by a crash", func(t *testing.T) {
		rw := harness.Mount(t, pool)
		writeFileSync(t, rw.Path("g"), []byte("written before the crash"), 0o644)
		// An orphan: unlinked while open when the daemon dies. Recovery
		// frees it, which on a read-only mount must stay in memory.
		writeFile(t, rw.Path("orphan"), bytes.Repeat([]byte{1}, 1<<20), 0o644)
		o, err := os.Open(rw.Path("orphan"))
		must(t, err)
		must(t, os.Remove(rw.Path("orphan")))
		rw.Kill(t)
		o.Close()
		check(t, map[string]string{"f": "kept", "g": "written before the crash"})
		// A read-write mount then recovers it for real.
		rw = harness.Mount(t, pool)
		if got := string(readFile(t, rw.Path("g"))); got != "written before the crash" {
			t.Errorf("g after the read-write mount: %q", got)
		}
		rw.Unmount(t)
	})
}
