package e2e_test

// Daemon mode (README "Install"): `dnnfs mount` without -f returns once the mount
// is live and leaves a daemon; a mount that cannot start exits non-zero
// with the reason and leaves nothing; SIGTERM unmounts cleanly; under
// systemd (the unit's own command line) it reports READY=1.

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// daemonWait bounds waiting for a daemon to go; it only guards against a
// hang, as a timeout.
const daemonWait = 2 * time.Minute

// alive reports whether pid exists and has not exited (a daemon that is
// not our child is reaped by someone else, maybe late: a zombie is gone).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// waitGone waits for pid to exit.
func waitGone(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(daemonWait)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("daemon %d still running after %v", pid, daemonWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// daemonServing returns the pid of the daemon that has pool open (it holds
// the pool's lock), failing the test if there is none, and makes sure it
// is stopped (SIGTERM) and its mount gone when the test ends.
func daemonServing(t *testing.T, pool, mnt string) int {
	t.Helper()
	pid := lockHolder(t, pool)
	if pid == 0 {
		t.Fatalf("no process holds the lock of %s: no daemon serves it", pool)
	}
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			waitGone(t, pid)
		}
		if isMountPoint(t, mnt) {
			t.Errorf("%s still mounted after its daemon stopped; detaching", mnt)
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
	})
	return pid
}

// writeRead writes a file on mnt and reads it back.
func writeRead(t *testing.T, mnt string) {
	t.Helper()
	p := filepath.Join(mnt, "hello")
	must(t, os.WriteFile(p, []byte("dnnfs daemon\n"), 0o644))
	if b, err := os.ReadFile(p); err != nil || string(b) != "dnnfs daemon\n" {
		t.Fatalf("read back %q, %v", b, err)
	}
}

func TestDaemonMode(t *testing.T) {
	t.Parallel()
	pool := harness.Mkfs(t, "64MiB")
	mnt := mountDir(t)
	logFile := filepath.Join(t.TempDir(), "daemon.log")
	stdout, stderr, code := harness.Run(t, "mount", "--pool", pool, mnt, "--log-file", logFile)
	if code != 0 || stdout != "" || stderr != "" {
		t.Fatalf("dnnfs mount (daemon): exit %d, stdout %q, stderr %q; want 0 and silence", code, stdout, stderr)
	}
	// Live as soon as the command returned: no waiting.
	if !isMountPoint(t, mnt) {
		t.Fatalf("%s is not mounted when dnnfs mount returned", mnt)
	}
	pid := daemonServing(t, pool, mnt)
	writeRead(t, mnt)

	// A daemon: its own session, no terminal or pipes of the command that
	// started it (stderr, with any panic, goes to the log), cwd /.
	if sid, err := unix.Getsid(pid); err != nil || sid != pid {
		t.Errorf("daemon %d: session %d (%v), want its own", pid, sid, err)
	}
	for fd, want := range map[int]string{0: os.DevNull, 1: logFile, 2: logFile} {
		if got, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd)); err != nil || got != want {
			t.Errorf("daemon fd %d is %q (%v), want %s", fd, got, err, want)
		}
	}
	if cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); err != nil || cwd != "/" {
		t.Errorf("daemon cwd %q (%v), want /", cwd, err)
	}

	// A second mount there fails in the command, not in a daemon.
	_, stderr, code = harness.Run(t, "mount", "--pool", harness.Mkfs(t, "64MiB"), mnt)
	if code != 1 || !strings.Contains(stderr, "busy") {
		t.Errorf("mount on a busy mountpoint: exit %d, stderr %q; want 1 and \"busy\"", code, stderr)
	}
	wantOneLine(t, "mount on a busy mountpoint", stderr)

	// SIGTERM: unmounted, pool marked clean.
	must(t, syscall.Kill(pid, syscall.SIGTERM))
	waitGone(t, pid)
	if isMountPoint(t, mnt) {
		t.Errorf("%s still mounted after SIGTERM to the daemon", mnt)
	}
	if out, code := harness.Fsck(t, pool); code != 0 || !strings.Contains(out, "clean") {
		t.Errorf("fsck after SIGTERM: exit %d\n%s", code, out)
	}
	log := string(readFile(t, logFile))
	for _, want := range []string{"\tmounted\t", "\tunmounting\t", "\tunmounted cleanly\t"} {
		if !strings.Contains(log, want) {
			t.Errorf("daemon log lacks %q:\n%s", want, log)
		}
	}
}

// A mount that fails in the daemon (after the command re-ran itself) exits
// with the daemon's code and reason and leaves no process and no mount.
func TestDaemonFailedMount(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPool := filepath.Join(dir, "notes.txt")
	must(t, os.WriteFile(notPool, []byte(strings.Repeat("not a pool\n", 100000)), 0o644))
	for _, pool := range []string{filepath.Join(dir, "missing"), notPool} {
		mnt := mountDir(t)
		_, stderr, code := harness.Run(t, "mount", "--pool", pool, mnt)
		if code != 1 || !strings.Contains(stderr, pool) {
			t.Errorf("mount of %s: exit %d, stderr %q; want 1 and the pool named", pool, code, stderr)
		}
		wantOneLine(t, "mount of "+pool, stderr)
		if isMountPoint(t, mnt) {
			t.Errorf("%s mounted after a failed mount", mnt)
		}
		for _, pid := range processesWith(t, mnt) {
			t.Errorf("process %d still runs for %s after the failed mount", pid, mnt)
		}
	}
}

// processesWith returns the pids whose command line has arg.
func processesWith(t testing.TB, arg string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	must(t, err)
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// unitExecStart returns the ExecStart line of the systemd unit with its
// specifiers and variables filled in as systemd would.
func unitExecStart(t *testing.T, bin, pool, mnt string, opts ...string) (unit string, argv []string) {
	t.Helper()
	root, err := harness.ModuleRoot()
	must(t, err)
	unit = string(readFile(t, filepath.Join(root, "dist", "dnnfs@.service.in")))
	sc := bufio.NewScanner(strings.NewReader(unit))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "ExecStart=")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(line) {
			switch f {
			case "@BINDIR@/dnnfs":
				argv = append(argv, bin)
			case "${POOL}":
				argv = append(argv, pool)
			case "$DNNFS_OPTIONS":
				argv = append(argv, opts...)
			case "%f":
				argv = append(argv, mnt)
			default:
				argv = append(argv, f)
			}
		}
	}
	if len(argv) == 0 {
		t.Fatal("dist/dnnfs@.service.in has no ExecStart")
	}
	return unit, argv
}

// The unit's command: READY=1 on $NOTIFY_SOCKET once the mount is live,
// STOPPING=1 and a clean unmount on SIGTERM, exit 0.
func TestSystemdUnitNotify(t *testing.T) {
	t.Parallel()
	bin := harness.Binary(t)
	pool := harness.Mkfs(t, "64MiB")
	mnt := mountDir(t)
	dir := t.TempDir()
	unit, argv := unitExecStart(t, bin, pool, mnt, "--log-file", filepath.Join(dir, "log"))
	for _, want := range []string{"Type=notify", "Restart=on-failure", "--foreground"} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	sockPath := filepath.Join(dir, "notify")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	must(t, err)
	defer sock.Close()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sockPath)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	must(t, cmd.Start())
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-done
		}
	})

	// read waits for the next message, but not for one a daemon that
	// exited can no longer send.
	read := func(want string) {
		t.Helper()
		buf := make([]byte, 4096)
		for deadline := time.Now().Add(daemonWait); ; {
			must(t, sock.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
			n, err := sock.Read(buf)
			if err == nil {
				if got := string(buf[:n]); got != want {
					t.Fatalf("NOTIFY_SOCKET got %q, want %q", got, want)
				}
				return
			}
			select {
			case <-done:
				t.Fatalf("waiting for %s on NOTIFY_SOCKET: the daemon exited (%v): %s", want, waitErr, stderr.String())
			default:
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) || time.Now().After(deadline) {
				t.Fatalf("waiting for %s on NOTIFY_SOCKET: %v", want, err)
			}
		}
	}
	read("READY=1")
	if !isMountPoint(t, mnt) {
		t.Fatalf("READY=1 came before %s was mounted", mnt)
	}
	writeRead(t, mnt)
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	read("STOPPING=1")
	<-done
	if waitErr != nil {
		t.Errorf("daemon after SIGTERM: %v, want exit 0 (stderr: %s)", waitErr, stderr.String())
	}
	if isMountPoint(t, mnt) {
		t.Errorf("%s still mounted after SIGTERM", mnt)
	}
	if out, code := harness.Fsck(t, pool); code != 0 || !strings.Contains(out, "clean") {
		t.Errorf("fsck after the unit's stop: exit %d\n%s", code, out)
	}
}
