package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// TestCLIStatusPaths: `dnnfs status` names the files with lock activity by
// their paths on the mount (the daemon's status JSON carries the inode
// numbers and the paths), and a file deleted while open as deleted.
func TestCLIStatusPaths(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "16MiB")
	must(t, os.MkdirAll(fs.Path("ckpt", "epoch 1"), 0o755))
	writeFile(t, fs.Path("ckpt", "epoch 1", "w.bin"), randBytes(1, 8192), 0o644)
	writeFile(t, fs.Path("top"), randBytes(2, 100), 0o644)
	f, err := os.OpenFile(fs.Path("ckpt", "gone"), os.O_CREATE|os.O_RDWR, 0o644)
	must(t, err)
	defer f.Close()
	_, err = f.Write(randBytes(3, 4096))
	must(t, err)
	must(t, os.Remove(fs.Path("ckpt", "gone")))

	out, stderr, code := harness.Run(t, "status", fs.Mnt)
	if code != 0 || stderr != "" {
		t.Fatalf("dnnfs status: exit %d, %s", code, stderr)
	}
	var files []string
	inTable := false
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "FILE ") {
			inTable = true
			continue
		}
		if inTable {
			if strings.TrimSpace(line) == "" {
				break
			}
			name, _, _ := strings.Cut(line, "  ")
			files = append(files, name)
		}
	}
	want := []string{fs.Path("ckpt", "epoch 1", "w.bin"), fs.Path("top")}
	for _, w := range want {
		if !strings.Contains(strings.Join(files, "\n"), w) {
			t.Errorf("dnnfs status does not name %s; files %q\n%s", w, files, out)
		}
	}
	deleted := regexp.MustCompile(`^\(deleted, ino \d+\)`)
	n := 0
	for _, name := range files {
		if deleted.MatchString(name) {
			n++
		} else if !strings.HasPrefix(name, fs.Mnt+"/") {
			t.Errorf("dnnfs status names a file %q, not a path on %s", name, fs.Mnt)
		}
	}
	if n != 1 {
		t.Errorf("dnnfs status shows %d deleted files, want 1 (the open, unlinked one):\n%s", n, out)
	}
	t.Logf("dnnfs status:\n%s", out)
}

// inTerminal runs dnnfs with args under script(1), whose pseudo-terminal
// is stdin, stdout and stderr (of size 0x0, which dnnfs takes as 80x24),
// and returns what the terminal showed.
func inTerminal(t *testing.T, args ...string) string {
	t.Helper()
	cmdline := "exec " + shellQuote(harness.Binary(t))
	for _, a := range args {
		cmdline += " " + shellQuote(a)
	}
	out, err := exec.Command("script", "-q", "-e", "-c", cmdline, "/dev/null").CombinedOutput()
	if err != nil {
		t.Fatalf("script -c %q: %v\n%s", cmdline, err, out)
	}
	return string(out)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestCLIProgress: cp, mkfs of a big pool, fsck and recover draw a progress bar on a terminal
// (through a pseudo-terminal) and print nothing more than their result
// when stderr is not one.
func TestCLIProgress(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB")
	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, src, randBytes(9, 6<<20), 0o644)
	// A bar: NAME, counters, [===...], percentage (mpb's BarStyle), after
	// the escape codes that move up over the bar drawn before.
	barOf := func(name, counts string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^(?:\x1b\[[0-9;]*[A-Za-z])*` + name + `\s+` + counts + `\s+\[=+\]\s+100 %`)
	}
	out := inTerminal(t, "cp", src, fs.Path("a"))
	if !barOf("cp", `6\.0 MiB / 6\.0 MiB`).MatchString(out) || !strings.Contains(out, "copied 6291456 bytes") {
		t.Errorf("dnnfs cp on a terminal shows no full bar:\n%s", out)
	}
	stdout, stderr, code := harness.Run(t, "cp", src, fs.Path("b"))
	if code != 0 || stderr != "" || strings.Count(stdout, "\n") != 1 {
		t.Errorf("dnnfs cp without a terminal: exit %d, stderr %q, stdout %q; want one line on stdout", code, stderr, stdout)
	}
	wantBytes(t, "file copied on a terminal", readFile(t, fs.Path("a")), readFile(t, src))
	fs.Unmount(t)

	// mkfs of a big pool (64 GiB): on a disk file system, where its 272 MiB
	// of metadata are allocated without being written.
	disk, err := os.MkdirTemp("/var/tmp", "dnnfs-mkfs-bar-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(disk) })
	out = inTerminal(t, "mkfs", "--pool", filepath.Join(disk, "big"), "--size", "64GiB")
	if !barOf("mkfs", `272\.0 MiB / 272\.0 MiB`).MatchString(out) || !strings.Contains(out, "created dnnfs pool") {
		t.Errorf("dnnfs mkfs of a 64 GiB pool on a terminal shows no full bar:\n%s", out)
	}
	stdout, stderr, code = harness.Run(t, "mkfs", "--pool", filepath.Join(disk, "big2"), "--size", "64GiB")
	if code != 0 || strings.Contains(stderr, "[=") || strings.Contains(stderr, "\x1b") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("dnnfs mkfs without a terminal: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}

	for _, args := range [][]string{{"fsck", "--pool", fs.Pool}, {"recover", "--pool", fs.Pool}} {
		out := inTerminal(t, args...)
		if !barOf(args[0], `(\d+)/(\d+)`).MatchString(out) {
			t.Errorf("dnnfs %s on a terminal shows no full bar:\n%s", strings.Join(args, " "), out)
		}
		stdout, stderr, code := harness.Run(t, args...)
		if code != 0 || stderr != "" || strings.Contains(stdout, "[=") || strings.Contains(stdout, "\x1b") {
			t.Errorf("dnnfs %s without a terminal: exit %d, stderr %q, stdout %q", strings.Join(args, " "), code, stderr, stdout)
		}
	}
}

// TestCLIErrorMessages: the errors say what is wrong and what to do, in
// one line: the flag a bad value was given to, the minimum pool size,
// "not a dnnfs pool" for a file that cannot be one, a path off any dnnfs
// mount, fusermount3's own reason, and a pool bigger than the free space
// under it.
func TestCLIErrorMessages(t *testing.T) {
	t.Parallel()
	const usage, runtime = 2, 1
	pool := harness.Mkfs(t, "16MiB")
	dir := t.TempDir()
	mnt := mountDir(t)
	wantIn := func(msg string, parts ...string) {
		t.Helper()
		for _, p := range parts {
			if !strings.Contains(msg, p) {
				t.Errorf("message %q does not say %q", msg, p)
			}
		}
	}
	// Every bad flag value names its flag.
	for _, c := range [][]string{
		{"--size", "mkfs", "--pool", filepath.Join(dir, "n"), "--size", "lots"},
		{"--size", "mkfs", "--pool", filepath.Join(dir, "n"), "--size", "9000PiB"},
		{"--threads", "cp", "--threads", "many", "a", "b"},
		{"--threads", "cp", "--threads", "0", "a", "b"},
		{"--repair", "fsck", "--pool", pool, "--repair=maybe"},
		{"--dtype", "table", "create", filepath.Join(dir, "t"), "--rows", "1", "--dim", "1", "--dtype", "f64"},
		{"--shard", "table", "create", filepath.Join(dir, "t"), "--rows", "1", "--dim", "1", "--shard", "big"},
		{"--rows", "table", "create", filepath.Join(dir, "t"), "--rows", "-1", "--dim", "1"},
	} {
		wantIn(badRun(t, "", []int{usage}, c[1:]...), c[0])
	}
	for _, c := range [][]string{
		{"--lock", "x"}, {"--atime", "x"}, {"--log-level", "x"}, {"--log-format", "x"}, {"--tail-interval", "x"},
		{"--tail-interval", "0"}, {"--commit-interval", "x"}, {"--commit-interval", "-1s"}, {"--migrate-interval", "x"},
		{"--ssd", dir + ":bw=x"}, {"--sched", "x"}, {"--classes", "x"}, {"--class-weights", "x"},
		{"--max-piece", "x"}, {"--compute-elements", "x"}, {"--compute-elements", "-1"}, {"--placement", "x"}, {"--shard-size", "x"}, {"--read-only=x"},
	} {
		flag, _, _ := strings.Cut(c[0], "=")
		wantIn(badRun(t, pool, []int{usage}, append([]string{"mount", "--pool", pool, mnt}, c...)...), flag)
	}
	// A missing --ssd directory is no usage error, but named too.
	wantIn(badRun(t, pool, []int{runtime}, "mount", "--pool", pool, mnt, "--ssd", filepath.Join(dir, "missing")), "--ssd")
	// Size 0 or below the minimum: the minimum.
	for _, size := range []string{"0", "1KiB", "3MiB"} {
		p := filepath.Join(dir, "small-"+size)
		wantIn(badRun(t, p, []int{usage, runtime}, "mkfs", "--pool", p, "--size", size), "--size", "minimum", "4 MiB")
	}
	// A text file and an empty file are not pools (not "too small").
	text := filepath.Join(dir, "notes.txt")
	writeFile(t, text, []byte("my notes\n"), 0o644)
	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, nil, 0o644)
	for _, p := range []string{text, empty} {
		for _, args := range [][]string{{"mount", "--pool", p, mnt}, {"fsck", "--pool", p}, {"recover", "--pool", p}} {
			msg := badRun(t, p, []int{usage, runtime}, args...)
			wantIn(msg, "not a dnnfs pool", "dnnfs mkfs")
			if strings.Contains(msg, "too small") {
				t.Errorf("%s: %q says too small", args, msg)
			}
		}
	}
	// table create/info off a dnnfs mount: said, and nothing created.
	tbl := filepath.Join(dir, "table")
	wantIn(badRun(t, "", []int{runtime}, "table", "create", tbl, "--rows", "10", "--dim", "4"), "not on a dnnfs mount")
	if _, err := os.Stat(tbl); err == nil {
		t.Errorf("table create off a dnnfs mount created %s", tbl)
	}
	wantIn(badRun(t, "", []int{runtime}, "table", "info", text), "not on a dnnfs mount")

	// A mount that fusermount3 refuses (a user without access to
	// /dev/fuse or the mountpoint): fusermount3's own words.
	// The pool and the mountpoint (root's, 0755: no write access) are
	// reachable by nobody, so the mount gets as far as fusermount3.
	if os.Geteuid() == 0 {
		makeReachable(t, mnt)
		shared := filepath.Join(filepath.Dir(mnt), "pool")
		writeFile(t, shared, readFile(t, pool), 0o666)
		must(t, os.Chmod(shared, 0o666))
		cmd := exec.Command("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", harness.Binary(t), "mount", "--pool", shared, mnt)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err == nil {
			t.Fatalf("mount as nobody succeeded")
		}
		t.Logf("mount as nobody: %s", stderr.String())
		wantOneLine(t, "mount as nobody", stderr.String())
		wantIn(stderr.String(), "fusermount3: ")
		if strings.Contains(stderr.String(), "exited with") {
			t.Errorf("mount as nobody: %q tells an exit code, not fusermount3's reason", stderr.String())
		}
	}
}

// TestCLISpaceWarning: mkfs and mount warn when a pool file may grow past
// the free space of the file system under it.
func TestCLISpaceWarning(t *testing.T) {
	t.Parallel()
	small := harness.TmpfsDir(t, "16m")
	var sfs unix.Statfs_t
	must(t, unix.Statfs(small, &sfs))
	if free := int64(sfs.Bavail) * sfs.Bsize; free > 32<<20 {
		t.Skipf("no small tmpfs to put the pool on (%d bytes free under %s)", free, small)
	}
	pool := filepath.Join(small, "pool")
	stdout, stderr, code := harness.Run(t, "mkfs", "--pool", pool, "--size", "64MiB")
	if code != 0 {
		t.Fatalf("mkfs: exit %d\n%s%s", code, stdout, stderr)
	}
	wantOneLine(t, "mkfs of a pool larger than its file system", stderr)
	if !strings.Contains(stderr, "warning") || !strings.Contains(stderr, "free") {
		t.Errorf("mkfs of a 64 MiB pool on a 16 MiB tmpfs: stderr %q, want a warning about free space", stderr)
	}
	fs := harness.Mount(t, pool)
	fs.Unmount(t)
	warned := false
	for _, w := range latestWarnings(t, fs.LogPath) {
		warned = warned || strings.Contains(w, "free")
	}
	if !warned {
		t.Errorf("mount of a 64 MiB pool on a 16 MiB tmpfs does not warn about free space: %q", latestWarnings(t, fs.LogPath))
	}
	// A pool that fits: no warning.
	roomy := filepath.Join(t.TempDir(), "pool")
	if _, stderr, code := harness.Run(t, "mkfs", "--pool", roomy, "--size", "8MiB"); code != 0 || stderr != "" {
		t.Errorf("mkfs of a pool that fits: exit %d, stderr %q", code, stderr)
	}
}

// TestHugePagePool: a pool on a tmpfs mounted huge=within_size is mapped by
// the daemon in 2 MiB pages once a file has been read after a remount (one
// fault and one TLB entry per 2 MiB, DESIGN.md §Where a pool lives); on a
// huge=never tmpfs it is not, which shows the check can fail.
func TestHugePagePool(t *testing.T) {
	t.Parallel()
	for _, huge := range []string{"never", "within_size"} {
		t.Run(huge, func(t *testing.T) {
			dir := harness.TmpfsDirWith(t, "size=256m,huge="+huge)
			pool := filepath.Join(dir, "pool")
			if stdout, stderr, code := harness.Run(t, "mkfs", "--pool", pool, "--size", "64MiB"); code != 0 {
				t.Fatalf("mkfs: exit %d\n%s%s", code, stdout, stderr)
			}
			fs := harness.Mount(t, pool)
			data := randBytes(7, 8<<20)
			must(t, os.WriteFile(fs.Path("f"), data, 0o644))
			fs.Unmount(t)
			fs = fs.Remount(t)
			got, err := os.ReadFile(fs.Path("f"))
			must(t, err)
			if !bytes.Equal(got, data) {
				t.Fatal("the file read back differs")
			}
			pmd := poolPmdMapped(t, fs.Pid(), pool)
			t.Logf("huge=%s: %d bytes of the pool mapped in 2 MiB pages", huge, pmd)
			if want := huge != "never"; (pmd > 0) != want {
				t.Errorf("pool on a huge=%s tmpfs: %d bytes of the daemon's mapping in 2 MiB pages after an 8 MiB file was read; want them %v", huge, pmd, map[bool]string{true: "> 0", false: "0"}[want])
			}
		})
	}
}

// poolPmdMapped returns the bytes of process pid's mapping of pool that are
// mapped in huge pages (smaps ShmemPmdMapped + FilePmdMapped).
func poolPmdMapped(t *testing.T, pid int, pool string) int64 {
	t.Helper()
	smaps := string(readFile(t, fmt.Sprintf("/proc/%d/smaps", pid)))
	var kb int64
	in := false
	for _, line := range strings.Split(smaps, "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = len(f) >= 6 && f[len(f)-1] == pool
			continue
		}
		if in && len(f) >= 2 && (f[0] == "ShmemPmdMapped:" || f[0] == "FilePmdMapped:") {
			n, err := strconv.ParseInt(f[1], 10, 64)
			must(t, err)
			kb += n
		}
	}
	return kb << 10
}
