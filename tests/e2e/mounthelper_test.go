package e2e_test

// The mount(8) helper (README "Install"): mount -t fuse.dnnfs, an fstab line
// through mount -a -T and mount -T, remount through the kernel, umount, -o
// options reaching the daemon, and fuse3's mount.fuse running `dnnfs POOL
// MNT -o OPTS`. mount(8) looks for /sbin/mount.fuse.dnnfs, so the test runs
// in a private mount namespace where an overlay on /sbin adds it (a link to
// the binary under test, as make install makes), leaving the machine's
// /sbin alone.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// mountNSEnv, set to a test's name, marks the run of that test inside its
// private mount namespace.
const mountNSEnv = "DNNFS_E2E_MOUNTNS"

// inPrivateMountNS reports whether this is the run of t inside a private
// mount namespace; if not, it runs t there (the test binary again) and
// fails t if that run fails.
func inPrivateMountNS(t *testing.T) bool {
	t.Helper()
	if os.Getenv(mountNSEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), mountNSEnv+"="+t.Name())
	// Go makes / recursively private in the new namespace: nothing
	// mounted there shows outside.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a private mount namespace: %v\n%s", t.Name(), err, out)
	}
	t.Logf("in a private mount namespace:\n%s", out)
	return false
}

// addMountHelper puts mount.fuse.dnnfs (and mount.dnnfs), links to the
// binary under test, into /sbin of this mount namespace.
func addMountHelper(t *testing.T) {
	t.Helper()
	bin := harness.Binary(t)
	sbin, err := filepath.EvalSymlinks("/sbin")
	must(t, err)
	dir := t.TempDir()
	for _, name := range []string{"mount.fuse.dnnfs", "mount.dnnfs"} {
		must(t, os.Symlink(bin, filepath.Join(dir, name)))
	}
	runOK(t, "mount", "-t", "overlay", "overlay", "-o", "lowerdir="+dir+":"+sbin, sbin)
}

// runCmd runs a command (not dnnfs itself) and returns its combined output
// and exit code.
func runCmd(t *testing.T, env []string, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), daemonWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		return string(out), ee.ExitCode()
	}
	t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	return "", 0
}

func runOK(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, code := runCmd(t, nil, name, args...)
	if code != 0 {
		t.Fatalf("%s %s: exit %d\n%s", name, strings.Join(args, " "), code, out)
	}
	return out
}

// mountOptionsOf returns the per-mount and superblock options of mnt as
// /proc/self/mountinfo shows them.
func mountOptionsOf(t *testing.T, mnt string) []string {
	t.Helper()
	for _, line := range strings.Split(string(readFile(t, "/proc/self/mountinfo")), "\n") {
		f := strings.Fields(line)
		if len(f) >= 10 && f[4] == mnt {
			return append(strings.Split(f[5], ","), strings.Split(f[len(f)-1], ",")...)
		}
	}
	t.Fatalf("%s is not mounted", mnt)
	return nil
}

func hasOption(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

// wantEROFS checks that writing to mnt fails with EROFS.
func wantEROFS(t *testing.T, mnt string) {
	t.Helper()
	err := os.WriteFile(filepath.Join(mnt, "hello"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Errorf("write on %s: %v, want EROFS", mnt, err)
	}
}

// umountAndWait unmounts mnt with umount(8) and waits for the daemon to
// exit; the pool must then be clean.
func umountAndWait(t *testing.T, pool, mnt string, pid int) {
	t.Helper()
	runOK(t, "umount", mnt)
	waitGone(t, pid)
	if out, code := harness.Fsck(t, pool); code != 0 || !strings.Contains(out, "clean") {
		t.Errorf("fsck after umount: exit %d\n%s", code, out)
	}
}

func TestMountHelper(t *testing.T) {
	t.Parallel()
	if !inPrivateMountNS(t) {
		return
	}
	addMountHelper(t)
	pool := harness.Mkfs(t, "64MiB")
	mnt := mountDir(t)
	logFile := filepath.Join(t.TempDir(), "daemon.log")

	t.Run("mount -t", func(t *testing.T) {
		// Underscores or dashes, bare booleans, values with commas.
		runOK(t, "mount", "-t", "fuse.dnnfs", pool, mnt, "-o",
			"allow_other,lock=file,log_file="+logFile+",classes=64,256,commit-interval=2s")
		pid := daemonServing(t, pool, mnt)
		if opts := mountOptionsOf(t, mnt); !hasOption(opts, "allow_other") {
			t.Errorf("mount options %v lack allow_other", opts)
		}
		writeRead(t, mnt)
		if out, _, code := harness.Run(t, "status", "--json", mnt); code != 0 || !strings.Contains(out, `"lock_mode":"file"`) {
			t.Errorf("-o lock=file: status --json (exit %d) says %s", code, out)
		}

		// A remount is the kernel's: no second daemon.
		runOK(t, "mount", "-o", "remount,ro", mnt)
		wantEROFS(t, mnt)
		if pids := processesWith(t, mnt); len(pids) != 1 || pids[0] != pid {
			t.Errorf("processes for %s after the remount: %v, want the daemon %d alone", mnt, pids, pid)
		}
		// dnnfs mount -o remount hands it to the kernel as well.
		if _, stderr, code := harness.Run(t, "mount", "-o", "remount,rw", mnt); code != 0 {
			t.Fatalf("dnnfs mount -o remount,rw %s: exit %d\n%s", mnt, code, stderr)
		}
		writeRead(t, mnt)
		umountAndWait(t, pool, mnt, pid)
	})

	t.Run("mount -t dnnfs", func(t *testing.T) {
		runOK(t, "mount", "-t", "dnnfs", pool, mnt, "-o", "log-file="+logFile)
		pid := daemonServing(t, pool, mnt)
		writeRead(t, mnt)
		umountAndWait(t, pool, mnt, pid)
	})

	t.Run("fstab", func(t *testing.T) {
		fstab := filepath.Join(t.TempDir(), "fstab")
		line := pool + " " + mnt + " fuse.dnnfs defaults,allow_other,_netdev,nofail,x-dnnfs-test,ro,noatime,log-file=" + logFile + " 0 0\n"
		must(t, os.WriteFile(fstab, []byte("# a temporary fstab\n"+line), 0o644))
		for _, args := range [][]string{{"-a", "-T", fstab}, {"-T", fstab, mnt}} {
			runOK(t, "mount", args...)
			pid := daemonServing(t, pool, mnt)
			opts := mountOptionsOf(t, mnt)
			if !hasOption(opts, "ro") || !hasOption(opts, "noatime") {
				t.Errorf("mount %v: options %v, want ro and noatime", args, opts)
			}
			if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "dnnfs daemon\n" {
				t.Errorf("mount %v: read %q, %v", args, b, err)
			}
			wantEROFS(t, mnt) // -o ro reached the daemon: --read-only
			umountAndWait(t, pool, mnt, pid)
		}
	})

	t.Run("bad option", func(t *testing.T) {
		out, code := runCmd(t, nil, "mount", "-t", "fuse.dnnfs", pool, mnt, "-o", "allow_other,bogus=1")
		if code == 0 || !strings.Contains(out, "bogus") {
			t.Errorf("mount -o bogus=1: exit %d, output %q; want a failure naming the option", code, out)
		}
		if isMountPoint(t, mnt) {
			t.Fatalf("%s mounted despite a bad option", mnt)
		}
		if pids := processesWith(t, mnt); len(pids) != 0 {
			t.Errorf("processes %v run for %s after a refused mount", pids, mnt)
		}
	})

	// Without mount.fuse.dnnfs, mount(8) runs fuse3's mount.fuse, which
	// runs `dnnfs POOL MNT -o OPTS` from PATH.
	t.Run("mount.fuse3", func(t *testing.T) {
		mountFuse, err := exec.LookPath("mount.fuse3")
		if err != nil {
			mountFuse = "/sbin/mount.fuse3"
		}
		path := t.TempDir()
		must(t, os.Symlink(harness.Binary(t), filepath.Join(path, "dnnfs")))
		out, code := runCmd(t, []string{"PATH=" + path + ":" + os.Getenv("PATH")},
			mountFuse, pool, mnt, "-t", "fuse.dnnfs", "-o", "ro,log-file="+logFile)
		if code != 0 {
			t.Fatalf("%s %s %s -t fuse.dnnfs -o ro: exit %d\n%s", mountFuse, pool, mnt, code, out)
		}
		pid := daemonServing(t, pool, mnt)
		wantEROFS(t, mnt)
		umountAndWait(t, pool, mnt, pid)
	})
}
