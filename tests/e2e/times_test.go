package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// tmpfsWith mounts a private tmpfs with mount flags (MS_NOATIME, ...).
func tmpfsWith(t *testing.T, flags uintptr) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	must(t, os.Mkdir(dir, 0o755))
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "mode=0755,size=64m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// atimeCase is one access whose effect on atime is compared with tmpfs:
// the file's times are set first (explicit values, far from now, so an
// update always shows), then access runs.
type atimeCase struct {
	name         string
	setup        func(t *testing.T, p string) // creates p
	atime, mtime time.Time
	access       func(t *testing.T, p string)
}

func atimeCases() []atimeCase {
	past := time.Unix(1_000_000, 0)
	future := time.Now().Add(time.Hour).Truncate(time.Second)
	file := func(t *testing.T, p string) { writeFile(t, p, []byte("some data"), 0o644) }
	empty := func(t *testing.T, p string) { writeFile(t, p, nil, 0o644) }
	dir := func(t *testing.T, p string) {
		must(t, os.Mkdir(p, 0o755))
		writeFile(t, filepath.Join(p, "x"), nil, 0o644)
	}
	link := func(t *testing.T, p string) { must(t, os.Symlink("target", p)) }
	read := func(t *testing.T, p string) { readFile(t, p) }
	return []atimeCase{
		{"read, atime older than ctime", file, past, past, read},
		{"read, atime newest", file, future, past, read},
		{"read, mtime newer than atime", file, future, future.Add(time.Hour), read},
		{"read at end of file", empty, past, past, read},
		{"O_NOATIME read", file, past, past, func(t *testing.T, p string) {
			fd := openFd(t, p, unix.O_RDONLY|unix.O_NOATIME, 0)
			preadFull(t, fd, 9, 0)
			closeFd(t, fd)
		}},
		{"write", file, past, past, func(t *testing.T, p string) {
			fd := openFd(t, p, unix.O_WRONLY, 0)
			pwriteFull(t, fd, []byte("x"), 0)
			closeFd(t, fd)
		}},
		{"stat", file, past, past, func(t *testing.T, p string) { lstat(t, p) }},
		{"mmap read", file, past, past, func(t *testing.T, p string) {
			fd := openFd(t, p, unix.O_RDONLY, 0)
			defer closeFd(t, fd)
			m, err := unix.Mmap(fd, 0, 9, unix.PROT_READ, unix.MAP_SHARED)
			must(t, err)
			// A page fault reads through FUSE (the daemon cannot see
			// mmap itself, where tmpfs updates atime).
			if m[0] != 's' {
				t.Errorf("mapped byte %q, want 's'", m[0])
			}
			must(t, unix.Munmap(m))
		}},
		{"readdir", dir, past, past, func(t *testing.T, p string) {
			if _, err := os.ReadDir(p); err != nil {
				t.Fatal(err)
			}
		}},
		{"readdir, atime newest", dir, future, past, func(t *testing.T, p string) {
			if _, err := os.ReadDir(p); err != nil {
				t.Fatal(err)
			}
		}},
		{"readlink", link, past, past, func(t *testing.T, p string) {
			if _, err := os.Readlink(p); err != nil {
				t.Fatal(err)
			}
		}},
	}
}

// runAtimeCases runs every case in dir and returns, per case, whether
// the access changed atime, and the atimes afterwards.
func runAtimeCases(t *testing.T, dir string) (changed []string, atimes []time.Time) {
	t.Helper()
	for i, c := range atimeCases() {
		p := filepath.Join(dir, fmt.Sprint(i))
		c.setup(t, p)
		ts := []unix.Timespec{unix.NsecToTimespec(c.atime.UnixNano()), unix.NsecToTimespec(c.mtime.UnixNano())}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
		c.access(t, p)
		a := statAtime(lstat(t, p))
		verdict := "changed"
		if a.Equal(c.atime) {
			verdict = "unchanged"
		}
		changed = append(changed, c.name+": "+verdict)
		atimes = append(atimes, a)
	}
	return changed, atimes
}

// mountOptions returns the per-mount options of mnt in mountinfo.
func mountOptions(t *testing.T, mnt string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == mnt {
			return f[5]
		}
	}
	t.Fatalf("%s is not in mountinfo", mnt)
	return ""
}

func statAtime(st unix.Stat_t) time.Time { return time.Unix(st.Atim.Unix()) }

// TestAtimeMatchesTmpfs: reads, listings and symlink reads update atime
// by the relatime, noatime and strictatime rules exactly where tmpfs
// mounted with the same option does, and the updated atimes survive a
// remount.
func TestAtimeMatchesTmpfs(t *testing.T) {
	t.Parallel()
	for _, m := range []struct {
		opt   string
		flags uintptr
	}{
		{"relatime", 0}, // the kernel's default, and dnnfs's
		{"noatime", unix.MS_NOATIME},
		{"strictatime", unix.MS_STRICTATIME},
	} {
		t.Run(m.opt, func(t *testing.T) {
			t.Parallel()
			want, _ := runAtimeCases(t, tmpfsWith(t, m.flags))
			var fs *harness.FS
			if m.opt == "relatime" {
				fs = newFS(t, "32MiB")
			} else {
				fs = newFS(t, "32MiB", "--atime", m.opt)
			}
			// mountinfo shows relatime or noatime, and neither for strictatime.
			opts := "," + mountOptions(t, fs.Mnt) + ","
			for _, o := range []string{"relatime", "noatime"} {
				if strings.Contains(opts, ","+o+",") != (o == m.opt) {
					t.Errorf("--atime %s: mount options %q", m.opt, opts)
				}
			}
			got, atimes := runAtimeCases(t, fs.Mnt)
			compareProbes(t, m.opt, want, got)
			fs.Unmount(t)
			fs = fs.Remount(t)
			for i, c := range atimeCases() {
				if a := statAtime(lstat(t, fs.Path(fmt.Sprint(i)))); !a.Equal(atimes[i]) {
					t.Errorf("%s: atime after remount %v, before %v", c.name, a, atimes[i])
				}
			}
		})
	}
}

// TestAtimeFlag: --atime takes relatime, noatime or strictatime only.
func TestAtimeFlag(t *testing.T) {
	t.Parallel()
	pool := harness.Mkfs(t, "16MiB")
	_, stderr, code := harness.Run(t, "mount", "--pool", pool, "--atime", "sometimes", t.TempDir())
	if code != 2 {
		t.Errorf("mount --atime sometimes: exit %d, want 2 (usage)\n%s", code, stderr)
	}
}

// TestMmapWriteTimes: stores through a shared writable mapping advance
// mtime and ctime once written back (msync, or munmap and close), as on
// tmpfs.
func TestMmapWriteTimes(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "32MiB")
	past := time.Unix(1_000_000, 0)
	for _, how := range []string{"msync", "munmap"} {
		p := fs.Path(how)
		writeFile(t, p, make([]byte, 8192), 0o644)
		must(t, os.Chtimes(p, past, past))
		before := lstat(t, p)
		fd := openFd(t, p, unix.O_RDWR, 0)
		m, err := unix.Mmap(fd, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		must(t, err)
		copy(m[4096:], "stored through the mapping")
		if how == "msync" {
			must(t, unix.Msync(m, unix.MS_SYNC))
		}
		must(t, unix.Munmap(m))
		closeFd(t, fd)
		after := lstat(t, p)
		if !time.Unix(after.Mtim.Unix()).After(past) {
			t.Errorf("%s: mtime %v not advanced past %v", how, time.Unix(after.Mtim.Unix()), past)
		}
		if time.Unix(after.Ctim.Unix()).Compare(time.Unix(before.Ctim.Unix())) <= 0 {
			t.Errorf("%s: ctime %v not advanced past %v", how, time.Unix(after.Ctim.Unix()), time.Unix(before.Ctim.Unix()))
		}
		wantBytes(t, how+": data", readFile(t, p)[4096:4096+26], []byte("stored through the mapping"))
	}
}
