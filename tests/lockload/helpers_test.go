package lockload_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	dfs "github.com/dnnfs/dnnfs/fs"
	"github.com/dnnfs/dnnfs/tests/harness"
)

// hangTimeout bounds each wait for a helper process or a condition: it
// detects a deadlock or starvation (and dumps the lock queues), it is never
// a performance threshold.
const hangTimeout = 90 * time.Second

func TestMain(m *testing.M) {
	// The race-enabled dnnfs binary would sleep 1 s at every exit.
	if _, ok := os.LookupEnv("GORACE"); !ok {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	code := m.Run()
	harness.RemoveBuiltBinary()
	os.Exit(code)
}

// writerBin builds tests/lockload/writer once per test process.
func writerBin(t *testing.T) string { return harness.Program(t, "./tests/lockload/writer") }

// Children are started from one goroutine locked to its thread:
// Pdeathsig fires when the forking *thread* exits (see tests/harness).
var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked
			for r := range spawnCh {
				r.res <- r.cmd.Start()
			}
		}()
	})
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := spawnReq{cmd, make(chan error, 1)}
	spawnCh <- r
	return <-r.res
}

// proc is a running helper process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout, line by line
	stdout bytes.Buffer
	stderr bytes.Buffer
	mu     sync.Mutex
	done   chan struct{}
	err    error
}

// start runs the helper: writer MODE args...; stdin stays open until
// closeStdin. The cleanup kills it if the test did not wait for it.
func start(t *testing.T, name string, mode string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, lines: make(chan string, 1024), done: make(chan struct{})}
	p.cmd = exec.Command(writerBin(t), append([]string{mode}, args...)...)
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = &lockedWriter{&p.mu, &p.stderr}
	if err := spawn(p.cmd); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("stdout:\n%sstderr:\n%s", p.stdout.String(), p.stderr.String())
}

func (p *proc) closeStdin() { _ = p.stdin.Close() }

// wait waits for p to exit 0; on a hang it dumps the lock state of file.
func (p *proc) wait(t *testing.T, file string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(hangTimeout):
		state := rawLocks(file)
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s did not finish within %v (deadlock or starvation?)\nlocks of %s: %s\n%s", p.name, hangTimeout, file, state, p.output())
	}
	if p.err != nil {
		t.Fatalf("%s: %v\n%s", p.name, p.err, p.output())
	}
}

// waitLine waits for a stdout line with the prefix.
func (p *proc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(hangTimeout)
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-p.done:
			// Drain what was printed before the exit.
			for {
				select {
				case l := <-p.lines:
					if strings.HasPrefix(l, prefix) {
						return l
					}
				default:
					t.Fatalf("%s exited (%v) before printing %q\n%s", p.name, p.err, prefix, p.output())
				}
			}
		case <-timeout:
			t.Fatalf("%s did not print %q within %v\n%s", p.name, prefix, hangTimeout, p.output())
		}
	}
}

// ---------------------------------------------------------------------------
// Files and lock state

func mount(t *testing.T, size string, args ...string) *harness.FS {
	t.Helper()
	return harness.Mount(t, harness.Mkfs(t, size), args...)
}

// preallocate creates path with size bytes allocated (fallocate), so that
// writes inside it neither allocate nor extend the file: the kernel then
// sends them in parallel (FOPEN_PARALLEL_DIRECT_WRITES covers only
// non-extending writes).
func preallocate(t *testing.T, path string, size int64) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Fallocate(fd, 0, 0, size); err != nil {
		t.Fatalf("fallocate %s: %v", path, err)
	}
}

func rawLocks(path string) string {
	buf := make([]byte, 1<<20)
	n, err := unix.Getxattr(path, dfs.XattrLocks, buf)
	if err != nil {
		return fmt.Sprintf("(getxattr %s: %v)", dfs.XattrLocks, err)
	}
	return string(buf[:n])
}

// locks reads user.dnnfs.locks of path.
func locks(t *testing.T, path string) dfs.LocksJSON {
	t.Helper()
	buf := make([]byte, 1<<20)
	n, err := unix.Getxattr(path, dfs.XattrLocks, buf)
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", path, dfs.XattrLocks, err)
	}
	var j dfs.LocksJSON
	if err := json.Unmarshal(buf[:n], &j); err != nil {
		t.Fatalf("%s of %s: %v\n%s", dfs.XattrLocks, path, err, buf[:n])
	}
	return j
}

// drained reads path's locks until its queues are empty, for up to 5 s: a
// read's lock is released when go-fuse calls its reply's Done, just after
// the reply reached the reader, so a reader may have exited a moment
// before. A lock that is never released is still there after.
func drained(t *testing.T, path string) dfs.LocksJSON {
	t.Helper()
	st := locks(t, path)
	for deadline := time.Now().Add(5 * time.Second); (len(st.Run) != 0 || len(st.Wait) != 0) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		st = locks(t, path)
	}
	return st
}

// waitFor polls cond (hang-bounded).
func waitFor(t *testing.T, what string, cond func() bool, dump func() string) {
	t.Helper()
	deadline := time.Now().Add(hangTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s\n%s", hangTimeout, what, dump())
		}
		time.Sleep(time.Millisecond)
	}
}
