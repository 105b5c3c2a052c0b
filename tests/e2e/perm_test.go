package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// A prober is one set of credentials the probe program runs with.
type prober struct {
	name       string
	uid, gid   uint32
	groups     []uint32
	dropFsetid bool // root without CAP_FSETID
}

var (
	nobodyProber  = prober{name: "uid 65534", uid: 65534, gid: 65534, groups: []uint32{}}
	nobody100     = prober{name: "uid 65534 in group 100", uid: 65534, gid: 65534, groups: []uint32{100}}
	rootProber    = prober{name: "root"}
	rootNoFsetid  = prober{name: "root without CAP_FSETID", dropFsetid: true}
	setuidProbers = []prober{nobodyProber, nobody100, rootProber, rootNoFsetid}
)

// probeBinary builds tests/e2e/probe once and makes it executable by
// other users (its build directory is private to root).
func probeBinary(t *testing.T) string {
	t.Helper()
	bin := harness.Program(t, "./tests/e2e/probe")
	must(t, os.Chmod(filepath.Dir(bin), 0o755))
	must(t, os.Chmod(bin, 0o755))
	makeReachable(t, bin)
	return bin
}

// probe runs script (see tests/e2e/probe) in dir as p and returns one
// result line per script line.
func probe(t *testing.T, p prober, dir, script string) []string {
	t.Helper()
	bin := probeBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var args []string
	if p.dropFsetid {
		args = append(args, "-drop-fsetid")
	}
	cmd := exec.CommandContext(ctx, bin, append(args, dir)...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	cmd.Stdin = strings.NewReader(script)
	if p.uid != 0 || p.gid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: p.uid, Gid: p.gid, Groups: p.groups}}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("probe as %s in %s: %v\nstderr: %s", p.name, dir, err, stderr.String())
	}
	return strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
}

// compareProbes fails t for every line where dnnfs answered differently
// from tmpfs.
func compareProbes(t *testing.T, who string, tmpfs, dnnfs []string) {
	t.Helper()
	if len(tmpfs) != len(dnnfs) {
		t.Fatalf("%s: %d results on tmpfs, %d on dnnfs:\ntmpfs:\n%s\ndnnfs:\n%s", who, len(tmpfs), len(dnnfs),
			strings.Join(tmpfs, "\n"), strings.Join(dnnfs, "\n"))
	}
	for i := range tmpfs {
		if tmpfs[i] != dnnfs[i] {
			t.Errorf("%s: dnnfs %q, tmpfs %q", who, dnnfs[i], tmpfs[i])
		}
	}
}

// wantProbe fails t unless results contain line exactly (a guard that
// the comparison is not between two equally wrong answers).
func wantProbe(t *testing.T, results []string, line string) {
	t.Helper()
	for _, r := range results {
		if r == line {
			return
		}
	}
	t.Errorf("no probe result %q in:\n%s", line, strings.Join(results, "\n"))
}

// permFixture builds, as root, the tree the permission probes run in.
func permFixture(t *testing.T, top string) {
	t.Helper()
	must(t, os.Mkdir(top, 0o755))
	must(t, os.Chmod(top, 0o755))
	type file struct {
		path     string
		mode     uint32
		uid, gid int
		data     string
	}
	script := "#!/bin/sh\nexit 0\n"
	dirs := []file{
		{"d755", 0o755, 0, 0, ""}, {"d700", 0o700, 0, 0, ""}, {"d711", 0o711, 0, 0, ""},
		{"d744", 0o744, 0, 0, ""}, {"d777", 0o777, 0, 0, ""}, {"d1777", 0o1777, 0, 0, ""},
		{"d2777", 0o2777, 0, 100, ""}, {"own", 0o755, 65534, 65534, ""}, {"d000", 0, 0, 0, ""},
		{"d1777/rootdir", 0o777, 0, 0, ""},
	}
	files := []file{
		{"f644", 0o644, 0, 0, "data"}, {"f600", 0o600, 0, 0, "data"}, {"f000", 0, 0, 0, "data"},
		{"f666", 0o666, 0, 0, "data"}, {"f604", 0o604, 0, 0, "data"}, {"f640g", 0o640, 0, 65534, "data"},
		{"f060g", 0o060, 0, 65534, "data"}, {"f400own", 0o400, 65534, 65534, "data"},
		{"f000own", 0, 65534, 65534, "data"}, {"f2644own", 0o644, 65534, 100, "data"},
		{"x755", 0o755, 0, 0, script}, {"x644", 0o644, 0, 0, script}, {"x700", 0o700, 0, 0, script},
		{"x705", 0o705, 0, 0, script},
		{"d755/inner", 0o644, 0, 0, "in"}, {"d711/inner", 0o644, 0, 0, "in"},
		{"d744/inner", 0o644, 0, 0, "in"}, {"d700/inner", 0o644, 0, 0, "in"},
		{"d777/rootf", 0o644, 0, 0, "r"}, {"d777/nobf", 0o644, 65534, 65534, "n"},
		{"d1777/rootf", 0o666, 0, 0, "r"}, {"d1777/rootf2", 0o666, 0, 0, "r"},
		{"d1777/nobf", 0o644, 65534, 65534, "n"}, {"d1777/nobf2", 0o644, 65534, 65534, "n"},
		{"own/rootf", 0o644, 0, 0, "r"},
	}
	for _, d := range dirs {
		must(t, os.Mkdir(filepath.Join(top, d.path), 0o700))
	}
	for _, f := range files {
		p := filepath.Join(top, f.path)
		must(t, os.WriteFile(p, []byte(f.data), 0o600))
		must(t, os.Chown(p, f.uid, f.gid))
		chmodNum(t, p, f.mode)
	}
	for _, d := range dirs { // after their files: some modes shut out their owner
		p := filepath.Join(top, d.path)
		must(t, os.Chown(p, d.uid, d.gid))
		chmodNum(t, p, d.mode)
	}
}

// chmodNum is chmod(2) with a numeric mode including the high bits.
func chmodNum(t testing.TB, path string, mode uint32) {
	t.Helper()
	must(t, retry(func() error { return syscall.Chmod(path, mode) }))
}

const permScript = `
stat f000
read f000
access f000 r
read f644
write f644
read f600
read f666
write f666
read f604
read f640g
write f640g
read f060g
write f060g
read f400own
write f400own
read f000own
stat f000own
chmod f000own 600
read f000own
exec x755
exec x644
exec x700
exec x705
access x755 x
access x644 x
ls d755
read d755/inner
ls d700
stat d700/inner
ls d711
read d711/inner
ls d744
stat d744/inner
ls d000
create d755/new 644
create d777/new 644
mkdir d777/newd 755
unlink d777/rootf
rename d777/nobf d777/nobf-moved
unlink d1777/rootf
unlink d1777/nobf
rename d1777/rootf2 d1777/taken
rename d1777/nobf2 d1777/rootf2
create d1777/mine 644
write d1777/rootf2
create d2777/f 644
stat d2777/f
mkdir d2777/sub 755
stat d2777/sub
chmod f644 777
chown f644 65534 -1
chown own 0 -1
chown f400own -1 0
chown f400own -1 65534
chmod f2644own 2755
stat f2644own
chmod f400own 0
stat f400own
touch f666
touch f644
utimes f666 1000
utimes f400own 1000
setxattr f644 user.x
setxattr f666 user.y
getxattr f666 user.y
unlink own/rootf
link f644 d777/hardlink
link f666 d777/hardlink2
symlink f644 d777/symlink
stat d777/symlink
rmdir d1777/rootdir
mkdir d1777/mydir 700
rename d777/newd d755/moved
rename d777/newd d777/renamed
trunc f644 0
trunc f666 1
setxattr f666 trusted.x
access f644 w
access f666 rw
stat f644
`

// TestPermissionsMatchTmpfs runs the same probes as uid 65534 on dnnfs
// (mounted with --allow-other) and on tmpfs: every answer must be the
// kernel's, mode 0000 included.
func TestPermissionsMatchTmpfs(t *testing.T) {
	t.Parallel()
	probers := []prober{nobodyProber, nobody100}
	tmp := tmpfsDir(t)
	makeReachable(t, filepath.Join(tmp, "x"))
	var want [][]string
	for i, p := range probers {
		ref := filepath.Join(tmp, fmt.Sprint(i))
		permFixture(t, ref)
		want = append(want, probe(t, p, ref, permScript))
	}
	// Guards: the reference itself denies what it must.
	wantProbe(t, want[0], "read f000 => EACCES")
	wantProbe(t, want[0], "stat f000 => OK mode=100000 uid=0 gid=0")
	wantProbe(t, want[0], "unlink d1777/rootf => EPERM")
	wantProbe(t, want[0], "stat d2777/f => OK mode=100644 uid=65534 gid=100")
	for _, mode := range [][]string{nil, {"--read-cache"}} {
		t.Run(fmt.Sprintf("mount%v", mode), func(t *testing.T) {
			fs := newFS(t, "32MiB", append([]string{"--allow-other"}, mode...)...)
			makeReachable(t, fs.Mnt)
			for i, p := range probers {
				top := fs.Path(fmt.Sprint(i))
				permFixture(t, top)
				compareProbes(t, p.name, want[i], probe(t, p, top, permScript))
			}
			// Mode 0000 round-trips for root too, and through a remount.
			if st := lstat(t, fs.Path("0", "f000")); st.Mode != syscall.S_IFREG {
				t.Errorf("root sees f000 with mode %o, want 100000", st.Mode)
			}
			fs.Unmount(t)
			fs = fs.Remount(t)
			for _, f := range []string{"f000", "f400own", "d000"} {
				a, b := lstat(t, filepath.Join(tmp, "0", f)), lstat(t, fs.Path("0", f))
				if a.Mode != b.Mode {
					t.Errorf("after remount: %s has mode %o, tmpfs %o", f, b.Mode, a.Mode)
				}
			}
		})
	}
}

// TestPermissionsWithoutAllowOther: without --allow-other the kernel lets
// only the mounting user (root) in; everyone else gets EACCES for
// everything, a 0777 directory and a 0666 file included.
func TestPermissionsWithoutAllowOther(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "32MiB")
	makeReachable(t, fs.Mnt)
	must(t, os.Chmod(fs.Mnt, 0o777))
	writeFile(t, fs.Path("f666"), []byte("data"), 0o666)
	chmodNum(t, fs.Path("f666"), 0o666)
	got := probe(t, nobodyProber, fs.Mnt, "stat .\nls .\nstat f666\nread f666\nwrite f666\ncreate new 644\n")
	for _, line := range got {
		if !strings.HasSuffix(line, " => EACCES") {
			t.Errorf("uid 65534 without --allow-other: %q, want EACCES", line)
		}
	}
	// Positive control: root, the mounting user, gets in.
	root := probe(t, rootProber, fs.Mnt, "read f666\nls .\n")
	if root[0] != "read f666 => OK 4" || root[1] != "ls . => OK 1" {
		t.Errorf("root: %q", root)
	}
}

// setuidScript clears nothing by itself: each line is one data change or
// chown of its own file (made by setuidFixture), followed by a stat of
// that file as the same caller.
func setuidScript(modes []uint32) (script string, files []string) {
	var b strings.Builder
	ops := []string{"write %s", "trunc %s 2", "otrunc %s", "falloc %s 8192", "chown %s -1 100", "chown %s 65534 65534"}
	names := []string{"write", "trunc", "otrunc", "falloc", "chgrp100", "chown"}
	for i, op := range ops {
		for _, m := range modes {
			f := fmt.Sprintf("%s-%o", names[i], m)
			files = append(files, f)
			fmt.Fprintf(&b, op+"\nstat %s\n", f, f)
		}
	}
	return b.String(), files
}

func setuidFixture(t *testing.T, dir string, files []string) {
	t.Helper()
	must(t, os.Mkdir(dir, 0o755))
	must(t, os.Chmod(dir, 0o755))
	for _, f := range files {
		var m uint32
		fmt.Sscanf(f[strings.LastIndexByte(f, '-')+1:], "%o", &m)
		p := filepath.Join(dir, f)
		writeFile(t, p, []byte("data"), 0o600)
		must(t, os.Chown(p, 65534, 100))
		chmodNum(t, p, m)
	}
}

// TestSetuidCleared compares with tmpfs what write, truncate, O_TRUNC,
// fallocate and chown leave of setuid/setgid bits, for callers with and
// without CAP_FSETID and in or out of the file's group. The kernel sends
// no SETATTR for a direct-I/O write: the daemon must clear the bits.
func TestSetuidCleared(t *testing.T) {
	t.Parallel()
	modes := []uint32{0o6755, 0o2745, 0o4644, 0o2755}
	script, files := setuidScript(modes)
	ref := tmpfsDir(t)
	makeReachable(t, ref)
	fs := newFS(t, "32MiB", "--allow-other")
	makeReachable(t, fs.Mnt)
	for i, p := range setuidProbers {
		dirT := filepath.Join(ref, fmt.Sprint(i))
		dirD := fs.Path(fmt.Sprint(i))
		setuidFixture(t, dirT, files)
		setuidFixture(t, dirD, files)
		want := probe(t, p, dirT, script)
		got := probe(t, p, dirD, script)
		compareProbes(t, p.name, want, got)
		// Root stats too, after the caller is gone.
		for _, f := range files {
			a, b := lstat(t, filepath.Join(dirT, f)), lstat(t, filepath.Join(dirD, f))
			if a.Mode != b.Mode {
				t.Errorf("%s: %s: root sees mode %o on dnnfs, %o on tmpfs", p.name, f, b.Mode, a.Mode)
			}
		}
		switch p.name {
		case nobodyProber.name:
			wantProbe(t, want, "stat write-6755 => OK mode=100755 uid=65534 gid=100")
			wantProbe(t, want, "stat write-2745 => OK mode=100745 uid=65534 gid=100")
		case rootProber.name:
			wantProbe(t, want, "stat write-6755 => OK mode=106755 uid=65534 gid=100")
		}
	}
	// The cleared bits are durable.
	fs.Unmount(t)
	fs = fs.Remount(t)
	for i := range setuidProbers {
		for _, f := range files {
			a, b := lstat(t, filepath.Join(ref, fmt.Sprint(i), f)), lstat(t, fs.Path(fmt.Sprint(i), f))
			if a.Mode != b.Mode {
				t.Errorf("after remount: %d/%s: mode %o, tmpfs %o", i, f, b.Mode, a.Mode)
			}
		}
	}
}
