// Package harness runs the dnnfs binary for end-to-end tests: it builds the
// binary once per test process, creates pools, mounts them in the
// foreground daemon mode, and makes sure that every mount is detached and
// every pool is checked with fsck when the test ends.
//
// Typical use:
//
//	pool := harness.Mkfs(t, "64MiB")
//	fs := harness.Mount(t, pool)
//	os.WriteFile(fs.Path("x"), data, 0o644)
//	fs.Unmount(t)
//	fs = fs.Remount(t)
//
// Environment:
//
//	DNNFS_BIN   use this binary instead of building ./cmd/dnnfs with -race.
//
// Mount registers cleanups that run even if the test fails or panics: the
// daemon is stopped (SIGTERM, then SIGKILL of its process group), a mount that
// is still present is detached lazily, and `dnnfs fsck --pool` must exit 0.
// The daemon runs in its own process group and gets SIGTERM from the kernel if
// the test process dies (Pdeathsig), so it unmounts itself even when the test
// binary is killed by `go test -timeout` or Ctrl-C.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// RunTimeout bounds every short-lived dnnfs invocation (mkfs, fsck, ...).
	RunTimeout = 60 * time.Second
	// MountTimeout bounds the wait for the mount to show up in mountinfo.
	MountTimeout = 20 * time.Second
	// UnmountTimeout bounds the wait for the daemon to exit after SIGTERM.
	UnmountTimeout = 30 * time.Second

	pollInterval = 20 * time.Millisecond
	fsType       = "fuse.dnnfs"
	logTailLines = 60
)

// ---------------------------------------------------------------------------
// Binary

var (
	binOnce sync.Once
	binPath string
	binDir  string
	binErr  error
)

// Binary returns the path of the dnnfs binary: $DNNFS_BIN if set, otherwise
// ./cmd/dnnfs built once per test process with `go build -race` into a
// temporary directory. A build failure fails the test with the compiler output.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("DNNFS_BIN"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatalf("harness: DNNFS_BIN=%q: %v", p, err)
		}
		if _, err := os.Stat(abs); err != nil {
			t.Fatalf("harness: DNNFS_BIN=%q: %v", p, err)
		}
		return abs
	}
	binOnce.Do(buildBinary)
	if binErr != nil {
		t.Fatalf("harness: building the dnnfs binary failed (set DNNFS_BIN to use a prebuilt one):\n%v", binErr)
	}
	return binPath
}

func buildBinary() {
	root, err := ModuleRoot()
	if err != nil {
		binErr = err
		return
	}
	parent := filepath.Join(os.TempDir(), "dnnfs-e2e-bin")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		binErr = err
		return
	}
	removeStaleBinaries(parent)
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("pid%d-", os.Getpid()))
	if err != nil {
		binErr = err
		return
	}
	out := filepath.Join(dir, "dnnfs")
	cmd := exec.Command(goTool(), "build", "-race", "-o", out, "./cmd/dnnfs")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	output, err := cmd.CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		binErr = fmt.Errorf("cd %s && %s: %v\n%s", root, strings.Join(cmd.Args, " "), err, output)
		return
	}
	binPath, binDir = out, dir
}

// removeStaleBinaries deletes the build directories ("pidN-*") of test
// processes that no longer exist, so that packages without a TestMain calling
// RemoveBuiltBinary do not leak a binary per run.
func removeStaleBinaries(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "pid%d-", &pid); err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
}

// RemoveBuiltBinary deletes the binary that Binary built, if any. Call it from
// TestMain after m.Run to avoid leaving the temporary directory behind:
//
//	func TestMain(m *testing.M) { code := m.Run(); harness.RemoveBuiltBinary(); os.Exit(code) }
func RemoveBuiltBinary() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	progMu.Lock()
	defer progMu.Unlock()
	for _, p := range progs {
		if p.dir != "" {
			os.RemoveAll(p.dir)
		}
	}
	progs = map[string]*program{}
}

// goTool finds the go command (`go test` puts its own on PATH).
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

// A helper program of a test package, built once per test process.
type program struct {
	once      sync.Once
	dir, path string
	err       error
}

var (
	progMu sync.Mutex
	progs  = map[string]*program{}
)

// Program builds the main package pkg (a path relative to the module root,
// e.g. "./tests/crash/workload") once per test process and returns the
// binary's path; RemoveBuiltBinary deletes it.
func Program(t testing.TB, pkg string) string {
	t.Helper()
	progMu.Lock()
	p := progs[pkg]
	if p == nil {
		p = &program{}
		progs[pkg] = p
	}
	progMu.Unlock()
	p.once.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			p.err = err
			return
		}
		if p.dir, err = os.MkdirTemp("", "dnnfs-prog-"); err != nil {
			p.err = err
			return
		}
		out := filepath.Join(p.dir, filepath.Base(pkg))
		cmd := exec.Command(goTool(), "build", "-o", out, pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			p.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
			return
		}
		p.path = out
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.path
}

// ModuleRoot returns the directory holding the repository's go.mod, found by
// walking up from the working directory (go test runs in the package
// directory), falling back to the location of this source file.
func ModuleRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if fileExists(filepath.Join(dir, "go.mod")) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("harness: cannot find go.mod above the working directory")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ---------------------------------------------------------------------------
// Process spawning

// All child processes are started from one goroutine locked to its OS thread
// for the lifetime of the process. Pdeathsig is delivered when the *thread*
// that forked the child exits, so starting children from arbitrary goroutines
// could kill them whenever the Go runtime retires a thread; a permanently
// locked thread only goes away with the test process itself.
var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

func spawner() {
	runtime.LockOSThread() // never unlocked, see above
	for r := range spawnCh {
		r.res <- r.cmd.Start()
	}
}

// startCmd starts cmd in its own process group; deathSig is sent to it if the
// test process dies.
func startCmd(cmd *exec.Cmd, deathSig syscall.Signal) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = deathSig
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go spawner()
	})
	r := spawnReq{cmd: cmd, res: make(chan error, 1)}
	spawnCh <- r
	return <-r.res
}

// killGroup sends sig to the process group led by pid (ignoring errors: the
// group may already be gone). Only call it while the leader has not been
// reaped, so that the number cannot have been reused.
func killGroup(pid int, sig syscall.Signal) {
	if pid > 0 {
		_ = syscall.Kill(-pid, sig)
	}
}

// ---------------------------------------------------------------------------
// Short-lived commands

// Run runs the dnnfs binary with args (60 s timeout) and returns its output
// and exit code. A failure to start or a timeout fails the test.
func Run(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin := Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), RunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var outBuf, errBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &errBuf
	cmd.Cancel = func() error {
		killGroup(cmd.Process.Pid, syscall.SIGKILL)
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	if err := startCmd(cmd, syscall.SIGKILL); err != nil {
		t.Fatalf("harness: starting dnnfs %s: %v", strings.Join(args, " "), err)
	}
	err := cmd.Wait()
	stdout, stderr = outBuf.String(), errBuf.String()
	if ctx.Err() != nil {
		t.Fatalf("harness: dnnfs %s timed out after %v\nstdout:\n%s\nstderr:\n%s",
			strings.Join(args, " "), RunTimeout, stdout, stderr)
	}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("harness: dnnfs %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
		if code < 0 { // killed by a signal
			code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
	}
	return stdout, stderr, code
}

// Mkfs creates a pool file named "pool" in a new t.TempDir() with
// `dnnfs mkfs --pool PATH --size size` and returns its path.
func Mkfs(t testing.TB, size string) string {
	t.Helper()
	pool := filepath.Join(t.TempDir(), "pool")
	stdout, stderr, code := Run(t, "mkfs", "--pool", pool, "--size", size)
	if code != 0 {
		t.Fatalf("harness: dnnfs mkfs --pool %s --size %s: exit code %d\nstdout:\n%s\nstderr:\n%s",
			pool, size, code, stdout, stderr)
	}
	return pool
}

// Fsck runs `dnnfs fsck --pool pool args...` and returns its combined output
// and exit code (0 clean, 1 problems found, 2 could not run).
func Fsck(t testing.TB, pool string, args ...string) (out string, code int) {
	t.Helper()
	stdout, stderr, code := Run(t, append([]string{"fsck", "--pool", pool}, args...)...)
	return joinOutput(stdout, stderr), code
}

func joinOutput(stdout, stderr string) string {
	switch {
	case stdout == "":
		return stderr
	case stderr == "":
		return stdout
	}
	if !strings.HasSuffix(stdout, "\n") {
		stdout += "\n"
	}
	return stdout + stderr
}

// ---------------------------------------------------------------------------
// Mounts

// FS is one running `dnnfs mount` daemon.
type FS struct {
	Pool    string   // pool file
	Mnt     string   // mount point
	LogPath string   // daemon stdout+stderr (appended to by Remount)
	Args    []string // extra arguments passed to `dnnfs mount`

	cmd       *exec.Cmd
	done      chan struct{} // closed when the daemon has exited (cmd.Wait returned)
	waitErr   error         // cmd.Wait's result, valid after done is closed
	logFile   *os.File
	stopped   bool   // Unmount or Kill was called (an exit is expected)
	replaced  bool   // a Remount took over the mount point (and the log)
	tailShown bool   // a failure message already included the log tail
	dev       string // "major:minor" of the mount (names the FUSE connection)
	startGen  int    // for log messages: 0 for Mount, n for the n-th Remount
}

// fsckSeen makes the cleanup fsck run once per (test, pool), after every
// mount of that pool in the test has been torn down.
var (
	fsckMu   sync.Mutex
	fsckSeen = map[testing.TB]map[string]bool{}
)

// Mount starts `dnnfs mount --pool pool MNT --log-level debug -f args...` with a
// fresh mount point in t.TempDir() and waits until the mount is visible in
// /proc/self/mountinfo. Cleanup (registered on t) stops the daemon and
// detaches the mount if the test has not done so, then requires that
// `dnnfs fsck --pool pool` exits 0.
func Mount(t testing.TB, pool string, args ...string) *FS {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir() // registered before our cleanups: removed after them
	f := &FS{
		Pool:    pool,
		Mnt:     filepath.Join(dir, "mnt"),
		LogPath: filepath.Join(dir, "dnnfs.log"),
		Args:    append([]string(nil), args...),
	}
	if err := os.Mkdir(f.Mnt, 0o755); err != nil {
		t.Fatalf("harness: %v", err)
	}
	registerFsck(t, pool)
	f.start(t, bin)
	return f
}

func registerFsck(t testing.TB, pool string) {
	fsckMu.Lock()
	defer fsckMu.Unlock()
	m := fsckSeen[t]
	if m == nil {
		m = map[string]bool{}
		fsckSeen[t] = m
	}
	if m[pool] {
		return
	}
	m[pool] = true
	// Cleanups run last-in first-out: this one was registered before the
	// unmount cleanup of every FS of this pool, so it runs after all of them.
	t.Cleanup(func() {
		fsckMu.Lock()
		delete(fsckSeen[t], pool)
		if len(fsckSeen[t]) == 0 {
			delete(fsckSeen, t)
		}
		fsckMu.Unlock()
		if mp := poolStillMounted(pool); mp != "" {
			t.Errorf("harness: not running fsck: pool %s still in use at %s", pool, mp)
			return
		}
		out, code := Fsck(t, pool)
		if code != 0 {
			t.Errorf("harness: cleanup: dnnfs fsck --pool %s: exit code %d\n%s", pool, code, out)
		}
	})
}

// liveMounts are the daemons started by this process, so that the fsck
// cleanup can refuse to run on a pool some daemon still serves.
var (
	mountedMu  sync.Mutex
	liveMounts = map[*FS]bool{}
)

func poolStillMounted(pool string) string {
	mountedMu.Lock()
	defer mountedMu.Unlock()
	for f := range liveMounts {
		if f.Pool == pool && !f.exited() {
			return f.Mnt
		}
	}
	return ""
}

// start launches the daemon for f (log appended to f.LogPath), waits for the
// mount and registers the cleanup.
func (f *FS) start(t testing.TB, bin string) {
	t.Helper()
	if mounted, _ := mountInfo(f.Mnt); mounted {
		t.Fatalf("harness: %s is already a mount point", f.Mnt)
	}
	lf, err := os.OpenFile(f.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	argv := append([]string{"mount", "--pool", f.Pool, f.Mnt, "--log-level", "debug", "-f"}, f.Args...)
	fmt.Fprintf(lf, "=== harness: %s %s (start #%d, %s)\n", bin, strings.Join(argv, " "),
		f.startGen, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, argv...)
	cmd.Stdout, cmd.Stderr = lf, lf
	f.cmd, f.logFile, f.done = cmd, lf, make(chan struct{})
	// SIGTERM on test-process death: the daemon unmounts itself cleanly.
	if err := startCmd(cmd, syscall.SIGTERM); err != nil {
		lf.Close()
		t.Fatalf("harness: starting %s: %v", bin, err)
	}
	go func() {
		f.waitErr = cmd.Wait()
		close(f.done)
	}()
	mountedMu.Lock()
	liveMounts[f] = true
	mountedMu.Unlock()
	t.Cleanup(func() { f.cleanup(t) })

	deadline := time.Now().Add(MountTimeout)
	for {
		if e := mountEntryOf(f.Mnt); e.mounted {
			f.dev = e.dev
			if e.fstype != fsType {
				t.Errorf("harness: %s is mounted with fstype %q, want %q", f.Mnt, e.fstype, fsType)
			}
			return
		}
		select {
		case <-f.done:
			f.stopped = true
			t.Fatalf("harness: dnnfs mount exited before the mount appeared (%s)\nlog tail:\n%s",
				describeExit(f.waitErr), f.tail())
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			f.stopped = true
			f.forceKill(t)
			detach(t, f.Mnt)
			t.Fatalf("harness: %s did not appear in /proc/self/mountinfo within %v; daemon killed\nlog tail:\n%s",
				f.Mnt, MountTimeout, f.tail())
		}
	}
}

// waitExit waits up to d for the daemon to exit. A daemon whose exit is
// stuck gets its FUSE connection aborted: when a FUSE daemon dies while one
// of its own threads has a request pending on its own mount (e.g. closing a
// file there), that thread waits forever for an answer only the dead daemon
// could give, and not even SIGKILL ends it. The symptom is a process that
// stays "dying" (see dying) for more than a second.
func (f *FS) waitExit(d time.Duration) bool {
	deadline := time.Now().Add(d)
	var zombieSince time.Time
	for {
		select {
		case <-f.done:
			return true
		case <-time.After(50 * time.Millisecond):
		}
		if dying(f.cmd.Process.Pid) {
			if zombieSince.IsZero() {
				zombieSince = time.Now()
			} else if time.Since(zombieSince) > time.Second {
				f.abortConn()
				zombieSince = time.Now()
			}
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// forceKill SIGKILLs the daemon's process group and waits (bounded) for it to
// exit, aborting its FUSE connection if it is stuck. It fails the test if the
// daemon cannot be ended; it never blocks forever.
func (f *FS) forceKill(t testing.TB) {
	t.Helper()
	if f.cmd == nil || f.cmd.Process == nil || f.exited() {
		return
	}
	killGroup(f.cmd.Process.Pid, syscall.SIGKILL)
	if f.waitExit(5 * time.Second) {
		return
	}
	f.abortConn()
	if !f.waitExit(10 * time.Second) {
		t.Fatalf("harness: dnnfs daemon (pid %d) for %s survives SIGKILL and a FUSE connection abort (state %q)",
			f.cmd.Process.Pid, f.Mnt, string(procState(f.cmd.Process.Pid)))
	}
}

// abortConn aborts the FUSE connection of f's mount through fusectl
// (mounting fusectl on /sys/fs/fuse/connections if needed): every pending and
// future request fails with ENOTCONN. Only done while the mount recorded at
// mount time is still in place, so that a connection number reused by a
// later mount is never touched.
func (f *FS) abortConn() {
	e := mountEntryOf(f.Mnt)
	if !e.mounted || e.dev != f.dev || f.dev == "" {
		return
	}
	_, minor, ok := strings.Cut(f.dev, ":")
	if !ok {
		return
	}
	const ctl = "/sys/fs/fuse/connections"
	abort := filepath.Join(ctl, minor, "abort")
	if !fileExists(abort) {
		_ = unix.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	_ = os.WriteFile(abort, []byte("1"), 0o200)
}

// dying reports whether process pid is exiting: its thread-group leader is a
// zombie that has not been reaped, or one of its threads has SIGKILL pending
// (the kernel queues SIGKILL on every thread when a fatal signal kills the
// group, and removes it as each thread exits).
func dying(pid int) bool {
	if procState(pid) == 'Z' {
		return true
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, task := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			mask, ok := strings.CutPrefix(line, "SigPnd:")
			if !ok {
				mask, ok = strings.CutPrefix(line, "ShdPnd:")
			}
			if !ok {
				continue
			}
			var bits uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(mask), "%x", &bits); err == nil && bits&(1<<(syscall.SIGKILL-1)) != 0 {
				return true
			}
		}
	}
	return false
}

// procState returns the state letter of /proc/PID/stat (0 if unknown).
func procState(pid int) byte {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}

func (f *FS) exited() bool {
	if f.done == nil {
		return true
	}
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// cleanup is registered by start. It never leaves the daemon running or the
// mount point attached.
func (f *FS) cleanup(t testing.TB) {
	defer func() {
		if f.cmd != nil && f.cmd.Process != nil && !f.exited() {
			killGroup(f.cmd.Process.Pid, syscall.SIGKILL)
		}
		if mounted, _ := mountInfo(f.Mnt); mounted && f.exited() {
			detach(t, f.Mnt)
		}
		if f.logFile != nil {
			f.logFile.Close()
		}
		mountedMu.Lock()
		delete(liveMounts, f)
		mountedMu.Unlock()
	}()
	if !f.exited() {
		f.Unmount(t)
	} else if !f.stopped {
		t.Errorf("harness: dnnfs daemon for %s exited on its own during the test (%s)\nlog tail:\n%s",
			f.Mnt, describeExit(f.waitErr), f.tail())
		f.stopped = true
		return
	}
	if t.Failed() && !f.replaced && !f.tailShown { // the newest FS of a log file prints it once
		t.Logf("harness: dnnfs log tail (%s):\n%s", f.LogPath, f.tail())
	}
}

// Unmount stops the daemon with SIGTERM and waits (30 s, then SIGKILL and a
// test failure) for it to exit. The exit code must be 0 and the mount must be
// gone from /proc/self/mountinfo.
func (f *FS) Unmount(t testing.TB) {
	t.Helper()
	if f.exited() {
		if !f.stopped {
			f.stopped = true
			t.Errorf("harness: Unmount: dnnfs daemon for %s had already exited (%s)\nlog tail:\n%s",
				f.Mnt, describeExit(f.waitErr), f.tail())
		}
		if mounted, _ := mountInfo(f.Mnt); mounted {
			detach(t, f.Mnt)
		}
		return
	}
	f.stopped = true
	if refs := releaseMountRefs(f.Mnt); len(refs) > 0 {
		t.Errorf("harness: the test process still used the mount %s at unmount time (released so the unmount can proceed):\n  %s",
			f.Mnt, strings.Join(refs, "\n  "))
	}
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	if !f.waitExit(UnmountTimeout) {
		f.forceKill(t)
		detach(t, f.Mnt)
		t.Fatalf("harness: dnnfs daemon for %s did not exit within %v of SIGTERM; killed\nlog tail:\n%s",
			f.Mnt, UnmountTimeout, f.tail())
	}
	if f.waitErr != nil {
		hint := ""
		if isSignal(f.waitErr, syscall.SIGTERM) {
			hint = " (the daemon must handle SIGTERM as soon as the mount is visible: install the signal handler before mounting)"
		}
		t.Errorf("harness: dnnfs mount daemon for %s: %s after SIGTERM, want exit code 0%s\nlog tail:\n%s",
			f.Mnt, describeExit(f.waitErr), hint, f.tail())
	} else if bad := f.logProblems(); bad != "" {
		t.Errorf("harness: dnnfs log for %s contains %s\nlog tail:\n%s", f.Mnt, bad, f.tail())
	}
	if mounted, _ := mountInfo(f.Mnt); mounted {
		t.Errorf("harness: %s still mounted after the daemon exited; detaching", f.Mnt)
		detach(t, f.Mnt)
	}
}

// logProblems reports race-detector reports or panics in the daemon log.
func (f *FS) logProblems() string {
	data, err := os.ReadFile(f.LogPath)
	if err != nil {
		return ""
	}
	for _, s := range []string{"WARNING: DATA RACE", "\npanic: ", "fatal error: "} {
		if bytes.Contains(data, []byte(s)) {
			return strings.TrimSpace(s)
		}
	}
	return ""
}

// Kill SIGKILLs the daemon (simulating a crash), waits for it, and detaches
// the dead mount with `umount -l` (falling back to `fusermount3 -u -z`).
// The pool is left as the crash left it; Remount recovers it.
func (f *FS) Kill(t testing.TB) {
	t.Helper()
	f.stopped = true
	f.forceKill(t)
	if mounted, _ := mountInfo(f.Mnt); mounted {
		detach(t, f.Mnt)
	}
}

// Remount mounts the same pool again at the same mount point with the same
// arguments and returns the new FS (the log is appended to the same file).
// If f's daemon is still running it is unmounted first.
func (f *FS) Remount(t testing.TB) *FS {
	t.Helper()
	if !f.exited() {
		f.Unmount(t)
	}
	if mounted, _ := mountInfo(f.Mnt); mounted {
		detach(t, f.Mnt)
	}
	bin := Binary(t)
	g := &FS{
		Pool:     f.Pool,
		Mnt:      f.Mnt,
		LogPath:  f.LogPath,
		Args:     append([]string(nil), f.Args...),
		startGen: f.startGen + 1,
	}
	f.replaced = true
	registerFsck(t, g.Pool)
	g.start(t, bin)
	return g
}

// Pid is the daemon's process id.
func (f *FS) Pid() int { return f.cmd.Process.Pid }

// Path returns the path of elem (joined) inside the mount.
func (f *FS) Path(elem ...string) string {
	return filepath.Join(append([]string{f.Mnt}, elem...)...)
}

// tail is LogTail for failure messages.
func (f *FS) tail() string {
	f.tailShown = true
	return f.LogTail(logTailLines)
}

// LogTail returns the last n lines of the daemon log.
func (f *FS) LogTail(n int) string {
	data, err := os.ReadFile(f.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", f.LogPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func isSignal(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal() == sig
		}
	}
	return false
}

func describeExit(err error) string {
	if err == nil {
		return "exit code 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exit code %d", ee.ExitCode())
	}
	return err.Error()
}

// ---------------------------------------------------------------------------
// Mount table

// mountInfo reports whether mnt is a mount point in /proc/self/mountinfo and
// the fstype of the topmost mount there.
func mountInfo(mnt string) (mounted bool, fstype string) {
	e := mountEntryOf(mnt)
	return e.mounted, e.fstype
}

type mountEntry struct {
	mounted bool
	fstype  string
	dev     string // "major:minor"; for FUSE, the minor names the fusectl connection
}

func mountEntryOf(mnt string) mountEntry {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return mountEntry{}
	}
	return parseMountInfo(data, mnt)
}

// parseMountInfo looks for mount point mnt in mountinfo-formatted data.
// Format (proc(5)): id parent major:minor root mountpoint options [optional...] - fstype source superoptions
func parseMountInfo(data []byte, mnt string) mountEntry {
	mnt = filepath.Clean(mnt)
	var e mountEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 || unescapeMountPath(fields[4]) != mnt {
			continue
		}
		ft := ""
		for i := 6; i < len(fields)-1; i++ {
			if fields[i] == "-" {
				ft = fields[i+1]
				break
			}
		}
		e = mountEntry{mounted: true, fstype: ft, dev: fields[2]} // later lines are stacked on top
	}
	return e
}

// unescapeMountPath undoes the octal escapes (\040 etc.) used in mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// detach lazily unmounts mnt: `umount -l`, then `fusermount3 -u -z`, then
// umount2(MNT_DETACH) directly. Failures are reported with t.Errorf.
func detach(t testing.TB, mnt string) {
	t.Helper()
	var msgs []string
	try := func(name string, args ...string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			msgs = append(msgs, fmt.Sprintf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out)))
		}
		mounted, _ := mountInfo(mnt)
		return !mounted
	}
	for i := 0; i < 10; i++ { // stacked mounts need one detach each
		if mounted, _ := mountInfo(mnt); !mounted {
			return
		}
		if try("umount", "-l", mnt) || try("fusermount3", "-u", "-z", mnt) {
			continue
		}
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			msgs = append(msgs, fmt.Sprintf("umount2(%s, MNT_DETACH): %v", mnt, err))
		}
	}
	if mounted, _ := mountInfo(mnt); mounted {
		t.Errorf("harness: cannot detach stale mount %s:\n%s", mnt, strings.Join(msgs, "\n"))
	}
}

// releaseMountRefs drops this process's references into mnt that would keep
// the file system busy (and the daemon's unmount retrying forever): open
// descriptors are atomically replaced by /dev/null, which keeps the number
// valid for whichever *os.File still owns it, and a working directory inside
// the mount is changed to "/". Memory mappings cannot be released and are only
// reported. It returns a description of each reference found.
func releaseMountRefs(mnt string) []string {
	mnt = filepath.Clean(mnt)
	under := func(p string) bool {
		p = strings.TrimSuffix(p, " (deleted)")
		return p == mnt || strings.HasPrefix(p, mnt+"/")
	}
	var found []string
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		var devNull = -1
		for _, e := range ents {
			target, err := os.Readlink("/proc/self/fd/" + e.Name())
			if err != nil || !under(target) {
				continue
			}
			fd := 0
			if _, err := fmt.Sscan(e.Name(), &fd); err != nil {
				continue
			}
			if devNull < 0 {
				if devNull, err = unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
					found = append(found, fmt.Sprintf("fd %d -> %s (cannot open /dev/null: %v)", fd, target, err))
					continue
				}
			}
			if err := unix.Dup3(devNull, fd, unix.O_CLOEXEC); err != nil {
				found = append(found, fmt.Sprintf("fd %d -> %s (dup3 failed: %v)", fd, target, err))
				continue
			}
			found = append(found, fmt.Sprintf("open fd %d -> %s", fd, target))
		}
		if devNull >= 0 {
			unix.Close(devNull)
		}
	}
	if wd, err := os.Readlink("/proc/self/cwd"); err == nil && under(wd) {
		_ = os.Chdir("/")
		found = append(found, "working directory "+wd+" (changed to /)")
	}
	if data, err := os.ReadFile("/proc/self/maps"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if i := strings.Index(line, " /"); i >= 0 && under(strings.TrimSpace(line[i:])) {
				found = append(found, "memory mapping "+strings.TrimSpace(line)+" (cannot be released)")
			}
		}
	}
	return found
}

// TmpfsDir returns an empty directory on a tmpfs of the given size (like
// "256m"): a private tmpfs mounted in t.TempDir() when possible (we
// normally run as root), else a directory under /dev/shm. Tests use it as
// the native reference to compare dnnfs against.
func TmpfsDir(t testing.TB, size string) string {
	t.Helper()
	return TmpfsDirWith(t, "size="+size)
}

// TmpfsDirWith is TmpfsDir with the tmpfs mount options given (size=,
// huge=, ...).
func TmpfsDirWith(t testing.TB, options string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755,"+options); err == nil {
		t.Cleanup(func() {
			if err := unix.Unmount(dir, 0); err != nil {
				_ = unix.Unmount(dir, unix.MNT_DETACH)
			}
		})
		return dir
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		t.Skip("cannot mount a tmpfs and /dev/shm is not a tmpfs")
	}
	shm, err := os.MkdirTemp("/dev/shm", "dnnfs-tmpfs-")
	if err != nil {
		t.Skip("no usable tmpfs: ", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	return shm
}
