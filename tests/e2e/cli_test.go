package e2e_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// hashFile returns the sha256 of a whole file ("" if it does not exist).
func hashFile(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return ""
	}
	must(t, err)
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// wantOneLine fails t unless stderr is exactly one non-empty line without
// traces of a panic.
func wantOneLine(t testing.TB, what, stderr string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != 1 || strings.TrimSpace(lines[0]) == "" || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("%s: stderr has %d lines, want exactly one:\n%s", what, len(lines), stderr)
	}
	for _, bad := range []string{"panic", "goroutine ", ".go:"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("%s: stderr contains %q:\n%s", what, bad, stderr)
		}
	}
}

// badRun runs the CLI with args, which must fail with one of the exit
// codes in want and exactly one line on stderr, leaving pool (if not "")
// byte-identical. It returns stderr.
func badRun(t testing.TB, pool string, want []int, args ...string) string {
	t.Helper()
	before := ""
	if pool != "" {
		before = hashFile(t, pool)
	}
	what := "dnnfs " + strings.Join(args, " ")
	stdout, stderr, code := harness.Run(t, args...)
	ok := false
	for _, w := range want {
		ok = ok || code == w
	}
	if !ok {
		t.Errorf("%s: exit code %d, want one of %v\nstdout: %s\nstderr: %s", what, code, want, stdout, stderr)
	}
	wantOneLine(t, what, stderr)
	if pool != "" {
		if after := hashFile(t, pool); after != before {
			if before == "" {
				t.Errorf("%s created %s", what, pool)
			} else {
				t.Errorf("%s changed the pool file %s", what, pool)
			}
		}
	}
	return stderr
}

// isMountPoint reports whether path is a mount point of this namespace.
func isMountPoint(t testing.TB, path string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	must(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == path {
			return true
		}
	}
	return false
}

// mountDir returns a new empty directory for a mount attempt; if a mount
// attempt unexpectedly succeeds, cleanup detaches it.
func mountDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(d, 0o755))
	t.Cleanup(func() {
		for i := 0; i < 5 && isMountPoint(t, d); i++ {
			t.Errorf("%s is still mounted; detaching", d)
			_ = unix.Unmount(d, unix.MNT_DETACH)
		}
	})
	return d
}

// latestWarnings returns the messages (without the structured fields) of
// the warnings logged by the daemon's latest start. It understands zap's
// console format ("TIME\twarn\tCALLER\tMESSAGE\t{fields}") and JSON.
func latestWarnings(t testing.TB, logPath string) []string {
	t.Helper()
	log := string(readFile(t, logPath))
	if i := strings.LastIndex(log, "=== harness:"); i >= 0 {
		log = log[i:]
	}
	var msgs []string
	for _, line := range strings.Split(log, "\n") {
		if f := strings.Split(line, "\t"); len(f) >= 4 && strings.EqualFold(f[1], "warn") {
			msgs = append(msgs, f[3])
		} else if strings.Contains(line, `"level":"warn"`) {
			if _, rest, ok := strings.Cut(line, `"msg":"`); ok {
				msg, _, _ := strings.Cut(rest, `"`)
				msgs = append(msgs, msg)
			}
		}
	}
	return msgs
}

// flipByte inverts the bits of one byte of a file.
func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	must(t, err)
	b[0] ^= 0xFF
	_, err = f.WriteAt(b, off)
	must(t, err)
}

// lockHolder returns the pid holding a write-conflicting POSIX lock on
// path (what dnnfs uses to lock a mounted pool), or 0.
func lockHolder(t testing.TB, path string) int {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	must(t, unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk))
	if lk.Type == unix.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}

func TestCLI(t *testing.T) {
	t.Parallel()
	const (
		usage       = 2 // bad flags
		codeRuntime = 1 // runtime errors
	)
	// A formatted, unmounted pool for the refused operations.
	// Only refused operations touch it, so the subtests share it and run
	// in parallel (none of them reaches the pool lock).
	clean := harness.Mkfs(t, "16MiB")
	cleanHash := hashFile(t, clean)
	t.Run("cases", func(t *testing.T) {
		t.Run("mkfs without --pool", func(t *testing.T) {
			t.Parallel()
			badRun(t, "", []int{usage}, "mkfs", "--size", "16MiB")
		})

		t.Run("mkfs bad sizes", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, size := range []string{"bogus", "0", ""} {
				p := filepath.Join(dir, "new-"+strconv.Quote(size))
				badRun(t, p, []int{usage}, "mkfs", "--pool", p, "--size", size)
				// The same on an existing pool, even with --force.
				badRun(t, clean, []int{usage}, "mkfs", "--pool", clean, "--size", size, "--force")
			}
			// Well-formed but too small: refused, and nothing created.
			for _, size := range []string{"1KiB", "1MiB"} {
				p := filepath.Join(dir, "small-"+size)
				badRun(t, p, []int{codeRuntime, usage}, "mkfs", "--pool", p, "--size", size)
				badRun(t, clean, []int{codeRuntime, usage}, "mkfs", "--pool", clean, "--size", size, "--force")
			}
		})

		t.Run("mkfs over an existing pool", func(t *testing.T) {
			t.Parallel()
			pool := harness.Mkfs(t, "16MiB")
			fs := harness.Mount(t, pool)
			writeFile(t, fs.Path("precious"), []byte("keep me"), 0o644)
			fs.Unmount(t)
			badRun(t, pool, []int{codeRuntime}, "mkfs", "--pool", pool, "--size", "16MiB")
			badRun(t, pool, []int{codeRuntime}, "mkfs", "--pool", pool, "--size", "32MiB")
			fs = fs.Remount(t)
			wantBytes(t, "file after the refused mkfs", readFile(t, fs.Path("precious")), []byte("keep me"))
			fs.Unmount(t)

			stdout, stderr, code := harness.Run(t, "mkfs", "--pool", pool, "--size", "32MiB", "--force")
			if code != 0 {
				t.Fatalf("mkfs --force: exit %d\n%s%s", code, stdout, stderr)
			}
			if st, err := os.Stat(pool); err != nil || st.Size() != 32<<20 {
				t.Errorf("pool after mkfs --force --size 32MiB: %v, %v", st, err)
			}
			fs = fs.Remount(t)
			if ents, err := os.ReadDir(fs.Mnt); err != nil || len(ents) != 0 {
				t.Errorf("root after mkfs --force: %d entries, %v; want an empty file system", len(ents), err)
			}
		})

		t.Run("mount missing pool", func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(t.TempDir(), "missing")
			badRun(t, p, []int{codeRuntime}, "mount", "--pool", p, mountDir(t))
		})

		t.Run("mount a file that is not a pool", func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(t.TempDir(), "random")
			writeFile(t, p, randBytes(77, 8<<20), 0o600)
			badRun(t, p, []int{codeRuntime}, "mount", "--pool", p, mountDir(t))
			// fsck cannot run on a file that is not a pool: exit 2.
			badRun(t, p, []int{2}, "fsck", "--pool", p)
			// A file of zeros is not a pool either.
			z := filepath.Join(t.TempDir(), "zeros")
			must(t, os.WriteFile(z, nil, 0o600))
			must(t, os.Truncate(z, 8<<20))
			badRun(t, z, []int{codeRuntime}, "mount", "--pool", z, mountDir(t))
		})

		// A bad primary superblock: the mount uses the replica, says so, and
		// rewrites the primary.
		for _, off := range []int64{0, 17} { // the magic; a field under the checksum
			t.Run("mount with superblock 0 damaged at byte "+strconv.FormatInt(off, 10), func(t *testing.T) {
				t.Parallel()
				pool := harness.Mkfs(t, "16MiB")
				fs := harness.Mount(t, pool)
				data := randBytes(uint64(off), 100000)
				writeFile(t, fs.Path("data"), data, 0o644)
				fs.Unmount(t)
				flipByte(t, pool, off)
				fs = fs.Remount(t)
				wantBytes(t, "file on the pool mounted from the replica", readFile(t, fs.Path("data")), data)
				fs.Unmount(t)
				warnings := latestWarnings(t, fs.LogPath)
				named := false
				for _, w := range warnings {
					named = named || strings.Contains(strings.ToLower(w), "primary")
				}
				if !named {
					t.Errorf("no warning naming the primary superblock in the mount log; warnings: %q", warnings)
				} else {
					t.Logf("warnings: %q", warnings)
				}
				if out, code := harness.Fsck(t, pool); code != 0 {
					t.Errorf("fsck after mounting from the replica: exit %d\n%s", code, out)
				}
				// The primary was rewritten: the next mount has nothing to say.
				fs = fs.Remount(t)
				fs.Unmount(t)
				for _, w := range latestWarnings(t, fs.LogPath) {
					if l := strings.ToLower(w); strings.Contains(l, "superblock") || strings.Contains(l, "primary") || strings.Contains(l, "replica") {
						t.Errorf("the mount after the repair still warns: %q", w)
					}
				}
			})
		}

		t.Run("mount with both superblocks corrupted", func(t *testing.T) {
			t.Parallel()
			pool := harness.Mkfs(t, "16MiB")
			flipByte(t, pool, 17)
			flipByte(t, pool, 4096+17)
			msg := badRun(t, pool, []int{codeRuntime}, "mount", "--pool", pool, mountDir(t))
			if !strings.Contains(strings.ToLower(msg), "both") {
				t.Errorf("message does not say both superblocks are bad: %s", msg)
			}
			_, code := harness.Fsck(t, pool)
			if code == 0 {
				t.Errorf("fsck of a pool with both superblocks corrupted: exit 0")
			}
			// Restore them so the harness's final fsck is clean.
			flipByte(t, pool, 17)
			flipByte(t, pool, 4096+17)
		})

		t.Run("mount a pool another daemon has", func(t *testing.T) {
			t.Parallel()
			pool := harness.Mkfs(t, "16MiB")
			fs := harness.Mount(t, pool)
			writeFile(t, fs.Path("f"), []byte("x"), 0o644)
			pid := lockHolder(t, pool)
			if pid == 0 {
				t.Fatal("no process holds a lock on the mounted pool")
			}
			if cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err != nil || !bytes.Contains(cmdline, []byte(pool)) {
				t.Fatalf("lock holder %d is not the daemon of %s: %q, %v", pid, pool, cmdline, err)
			}
			msg := badRun(t, pool, []int{codeRuntime}, "mount", "--pool", pool, mountDir(t))
			if !strings.Contains(msg, strconv.Itoa(pid)) {
				t.Errorf("message does not name the daemon's pid %d: %s", pid, msg)
			}
			badRun(t, pool, []int{codeRuntime}, "mkfs", "--pool", pool, "--size", "16MiB", "--force")
			// The first daemon is unaffected.
			wantBytes(t, "file on the first mount", readFile(t, fs.Path("f")), []byte("x"))
			writeFile(t, fs.Path("g"), []byte("y"), 0o644)
		})

		t.Run("mountpoint missing", func(t *testing.T) {
			t.Parallel()
			badRun(t, clean, []int{codeRuntime}, "mount", "--pool", clean, filepath.Join(t.TempDir(), "nonexistent"))
		})

		t.Run("mountpoint is a file", func(t *testing.T) {
			t.Parallel()
			f := filepath.Join(t.TempDir(), "file")
			writeFile(t, f, []byte("not a dir"), 0o644)
			badRun(t, clean, []int{codeRuntime}, "mount", "--pool", clean, f)
			wantBytes(t, "the file used as mountpoint", readFile(t, f), []byte("not a dir"))
		})

		t.Run("mountpoint busy", func(t *testing.T) {
			t.Parallel()
			d := mountDir(t)
			if err := unix.Mount("tmpfs", d, "tmpfs", 0, "size=1m"); err != nil {
				t.Skipf("cannot mount a tmpfs to make %s busy: %v", d, err)
			}
			defer func() {
				if err := unix.Unmount(d, 0); err != nil {
					t.Errorf("unmounting the tmpfs: %v", err)
				}
			}()
			writeFile(t, filepath.Join(d, "on-tmpfs"), []byte("t"), 0o644)
			badRun(t, clean, []int{codeRuntime}, "mount", "--pool", clean, d)
			wantBytes(t, "file on the tmpfs after the refused mount", readFile(t, filepath.Join(d, "on-tmpfs")), []byte("t"))
		})

		t.Run("bad flags", func(t *testing.T) {
			t.Parallel()
			badRun(t, "", []int{usage}, "frobnicate")
			badRun(t, "", []int{usage}, "mkfs", "--pool", filepath.Join(t.TempDir(), "p"), "--size", "16MiB", "--bogus")
			badRun(t, clean, []int{usage}, "mount", "--pool", clean)
			badRun(t, clean, []int{usage}, "mount", "--pool", clean, mountDir(t), "--log-level", "loud")
			badRun(t, clean, []int{usage}, "mount", mountDir(t))
			badRun(t, clean, []int{usage}, "fsck")
		})

		t.Run("version", func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := harness.Run(t, "version")
			if code != 0 || stderr != "" {
				t.Errorf("dnnfs version: exit %d, stderr %q", code, stderr)
			}
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "dnnfs ") || len(strings.TrimSpace(strings.TrimPrefix(lines[0], "dnnfs "))) == 0 {
				t.Errorf("dnnfs version printed %q, want one line \"dnnfs VERSION\"", stdout)
			}
		})

		t.Run("fsck", func(t *testing.T) {
			t.Parallel()
			pool := harness.Mkfs(t, "16MiB")
			before := hashFile(t, pool)
			if out, code := harness.Fsck(t, pool); code != 0 {
				t.Errorf("fsck of a clean pool: exit %d\n%s", code, out)
			}
			if hashFile(t, pool) != before {
				t.Error("fsck without --repair changed the pool")
			}
			p := filepath.Join(t.TempDir(), "missing")
			badRun(t, p, []int{2}, "fsck", "--pool", p)
		})
	})

	if hashFile(t, clean) != cleanHash {
		t.Error("the refused operations changed the shared pool")
	}
	if out, code := harness.Fsck(t, clean); code != 0 {
		t.Errorf("fsck of the pool used for refused operations: exit %d\n%s", code, out)
	}
}

// TestSIGTERMRightAfterMount: a SIGTERM that arrives as soon as the mount
// is visible must still unmount cleanly (exit 0, pool clean). The harness
// sends it as soon as the mount shows up in mountinfo.
func TestSIGTERMRightAfterMount(t *testing.T) {
	t.Parallel()
	pool := harness.Mkfs(t, "16MiB")
	fs := harness.Mount(t, pool)
	for i := 0; i < 5 && !t.Failed(); i++ {
		fs.Unmount(t)
		fs = fs.Remount(t)
	}
}
