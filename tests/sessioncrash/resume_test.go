package sessioncrash_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
	"github.com/dnnfs/dnnfs/tests/sessioncrash/srcdata"
)

const (
	mib          = 1 << 20
	writerChunk  = 1 * mib // the writer's pwrite size
	jobTimeout   = 3 * time.Minute
	xattrSession = "user.dnnfs.session"
)

func TestMain(m *testing.M) {
	// The race-built daemon's runtime sleeps 1 s at exit by default; race
	// reports still fail it (exit code 66 and the harness's log check).
	if _, ok := os.LookupEnv("GORACE"); !ok {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	code := m.Run()
	harness.RemoveBuiltBinary()
	os.Exit(code)
}

// needMount skips a test that mounts when this machine cannot.
func needMount(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil && os.Geteuid() != 0 {
		t.Skip("neither root nor fusermount3")
	}
}

// writerBinary builds ./writer once per test process.
func writerBinary(t *testing.T) string { return harness.Program(t, "./tests/sessioncrash/writer") }

// segInfo and sessInfo mirror pool.SessionSegment and pool.SessionInfo.
type segInfo struct {
	Index  int    `json:"index"`
	Start  uint64 `json:"start"`
	Length uint64 `json:"length"`
	Tail   uint64 `json:"tail"`
	Done   bool   `json:"done"`
	Pid    uint32 `json:"pid"`
}

type sessInfo struct {
	Threads  int       `json:"threads"`
	Size     uint64    `json:"size"`
	Mode     string    `json:"mode"`
	Done     bool      `json:"done"`
	Segments []segInfo `json:"segments"`
}

// line is one JSON line of the writer's stdout.
type line struct {
	Event    string    `json:"event"`
	Resumed  bool      `json:"resumed"`
	Segments []segInfo `json:"segments"`
	Bytes    []uint64  `json:"bytes"`
	Total    uint64    `json:"total"`
	Seconds  float64   `json:"seconds"`
	Open     bool      `json:"open_after"`
}

// job is a running writer.
type job struct {
	cmd     *exec.Cmd
	log     string // its progress file
	started chan line
	done    chan struct{}
	err     error // valid after done
	mu      sync.Mutex
	lines   []line
	stderr  bytes.Buffer
}

// startJob runs the writer with args (plus -log). The process is started
// and waited for from one goroutine locked to its thread, so Pdeathsig
// (SIGKILL if the test dies) stays armed for the writer's whole life.
func startJob(t *testing.T, logPath string, args ...string) *job {
	t.Helper()
	j := &job{log: logPath, started: make(chan line, 1), done: make(chan struct{})}
	j.cmd = exec.Command(writerBinary(t), append([]string{"-log", logPath}, args...)...)
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	j.cmd.Stderr = &j.stderr
	stdout, err := j.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	startErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := j.cmd.Start(); err != nil {
			startErr <- err
			return
		}
		startErr <- nil
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l line
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			j.mu.Lock()
			j.lines = append(j.lines, l)
			j.mu.Unlock()
			if l.Event == "started" || l.Event == "none" {
				select {
				case j.started <- l:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
		j.err = j.cmd.Wait()
		close(j.done)
	}()
	if err := <-startErr; err != nil {
		t.Fatalf("starting the writer: %v", err)
	}
	t.Cleanup(func() { j.kill() })
	return j
}

func (j *job) kill() {
	if j.cmd.Process != nil {
		_ = syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-j.done
}

// wait waits for the writer to exit and returns its summary line.
func (j *job) wait(t *testing.T) line {
	t.Helper()
	select {
	case <-j.done:
	case <-time.After(jobTimeout):
		j.kill()
		t.Fatalf("writer %v did not finish within %v", j.cmd.Args, jobTimeout)
	}
	if j.err != nil {
		t.Fatalf("writer %v: %v\n%s", j.cmd.Args, j.err, j.stderr.String())
	}
	return j.last()
}

func (j *job) last() line {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.lines) == 0 {
		return line{}
	}
	return j.lines[len(j.lines)-1]
}

// firstLine returns the writer's "started" (or "none") line, if printed.
func (j *job) firstLine() (line, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.lines) == 0 {
		return line{}, false
	}
	return j.lines[0], true
}

// progress reads the writer's progress file: bytes moved per segment.
func progress(path string, n int) []uint64 {
	b, _ := os.ReadFile(path)
	out := make([]uint64, n)
	for i := range out {
		if len(b) >= 8*(i+1) {
			out[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
	}
	return out
}

func sum(v []uint64) uint64 {
	var s uint64
	for _, x := range v {
		s += x
	}
	return s
}

// getSession reads user.dnnfs.session of path; false when none is open.
func getSession(t *testing.T, path string) (sessInfo, bool) {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Getxattr(path, xattrSession, buf)
	if errors.Is(err, unix.ENODATA) {
		return sessInfo{}, false
	}
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", path, xattrSession, err)
	}
	var s sessInfo
	if err := json.Unmarshal(buf[:n], &s); err != nil {
		t.Fatalf("%s JSON %q: %v", xattrSession, buf[:n], err)
	}
	return s, true
}

// compareFile requires path to hold exactly size bytes of source seed.
func compareFile(t *testing.T, path string, seed, size uint64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if uint64(st.Size()) != size {
		t.Fatalf("%s is %d bytes, want %d", path, st.Size(), size)
	}
	buf := make([]byte, 4*mib)
	for off := uint64(0); off < size; {
		n, err := f.ReadAt(buf[:min(uint64(len(buf)), size-off)], int64(off))
		if n == 0 && err != nil {
			t.Fatalf("reading %s at %d: %v", path, off, err)
		}
		if d := srcdata.FirstDiff(seed, int64(off), buf[:n]); d >= 0 {
			t.Fatalf("%s: byte %d differs from the source (in the segment of %d-byte segments: %d)", path, off+uint64(d), size/4, (off+uint64(d))/(size/4))
		}
		off += uint64(n)
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a count", name, v)
	}
	return n
}

// ---------------------------------------------------------------------------

// TestSessionCrashResume: a 4-thread 128 MiB write session, the daemon
// killed (kill -9) at a random moment, the writer killed, remount: the
// session is open with tails at (about) the writer's progress; the writer
// runs again, resumes from the tails, and the file ends up whole with the
// session closed. The bytes written twice are bounded by the tail
// interval and the writes in flight.
func TestSessionCrashResume(t *testing.T) {
	needMount(t)
	const (
		threads  = 4
		size     = 128 * mib
		interval = 1 * mib
	)
	rounds := envInt(t, "DNNFS_SESSION_ROUNDS", 6)
	pool := harness.Mkfs(t, "320MiB")
	fs := harness.Mount(t, pool, "--tail-interval", "1MiB")
	logDir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var table []string
	midSession := 0
	est := 1500 * time.Millisecond // how long a whole first run takes, as last seen
	for r := 0; r < rounds; r++ {
		file := fs.Path("weights.bin")
		seed := uint64(1000 + r)
		logA := filepath.Join(logDir, fmt.Sprintf("r%d-a", r))
		logB := filepath.Join(logDir, fmt.Sprintf("r%d-b", r))
		args := []string{"-file", file, "-threads", strconv.Itoa(threads), "-size", strconv.Itoa(size),
			"-seed", strconv.FormatUint(seed, 10), "-chunk", strconv.Itoa(writerChunk)}
		// A random moment 100-1500 ms in, within the time a whole run
		// has been seen to take, so that most kills land mid-session.
		span := min(1400*time.Millisecond, est*85/100-100*time.Millisecond)
		delay := 100*time.Millisecond + time.Duration(rng.Int64N(int64(max(span, 50*time.Millisecond))))
		t0 := time.Now()
		a := startJob(t, logA, args...)
		finished := false
		select {
		case <-a.done:
			finished = true
			est = time.Since(t0)
		case <-time.After(delay):
		}
		fs.Kill(t)
		a.kill()
		first, started := a.firstLine()
		prog := progress(logA, threads)
		if w := sum(prog); !finished && w > 8*mib {
			est = (est + time.Duration(float64(delay)*float64(size)/float64(w))) / 2
		}
		fs = fs.Remount(t)

		var info sessInfo
		open := false
		if _, err := os.Stat(file); err == nil || started {
			// (A writer killed before it created the file leaves none.)
			info, open = getSession(t, file)
		}
		if open && !strings.Contains(fs.LogTail(40), `"sessions_resumable": 1`) {
			t.Errorf("round %d: a session is open after the crash, but the mount did not report it resumable:\n%s", r, fs.LogTail(40))
		}
		switch {
		case open:
			midSession++
			if !started {
				t.Logf("round %d: the session was committed but the writer never saw setxattr return", r)
			}
			if info.Threads != threads || info.Size != size || info.Mode != "write" || len(info.Segments) != threads {
				t.Fatalf("round %d: session after the crash: %+v", r, info)
			}
			for i, sg := range info.Segments {
				done := prog[i]
				if started && first.Resumed {
					t.Fatalf("round %d: the first run resumed a session", r)
				}
				if sg.Tail < sg.Start || sg.Tail > sg.Start+sg.Length {
					t.Errorf("round %d: segment %d: tail %d outside [%d, %d]", r, i, sg.Tail, sg.Start, sg.Start+sg.Length)
				}
				// Behind the writer's count by at most one tail interval;
				// ahead by at most the write in flight.
				if sg.Tail+interval < sg.Start+done {
					t.Errorf("round %d: segment %d: tail %d is more than the tail interval behind the %d bytes the writer completed (start %d)",
						r, i, sg.Tail, done, sg.Start)
				}
				if sg.Tail > sg.Start+done+writerChunk {
					t.Errorf("round %d: segment %d: tail %d is past the %d bytes the writer completed plus one write in flight (start %d)",
						r, i, sg.Tail, done, sg.Start)
				}
				if sg.Done != (sg.Tail == sg.Start+sg.Length) {
					t.Errorf("round %d: segment %d: done %v with tail %d of [%d, %d)", r, i, sg.Done, sg.Tail, sg.Start, sg.Start+sg.Length)
				}
			}
		case started:
			// The session closed (finished) before the kill.
			if !finished && sum(prog) < size-threads*writerChunk {
				t.Fatalf("round %d: no session after the crash, but the writer had written only %d of %d bytes", r, sum(prog), size)
			}
		}
		var b line
		if open || !started {
			// Resume (or, if the first run never started the session, run again).
			bj := startJob(t, logB, args...)
			b = bj.wait(t)
			if b.Event != "summary" || b.Open {
				t.Fatalf("round %d: resumed writer: %+v", r, b)
			}
			if open && !b.Resumed {
				t.Fatalf("round %d: the second run did not resume the open session", r)
			}
		}
		if _, ok := getSession(t, file); ok {
			t.Fatalf("round %d: the session is still open after the writer finished", r)
		}
		compareFile(t, file, seed, size)
		total := sum(prog) + b.Total
		redone := int64(total) - size
		bound := int64(threads*interval + threads*writerChunk)
		var tails []string
		for _, sg := range info.Segments {
			tails = append(tails, fmt.Sprintf("%.1f", float64(sg.Tail-sg.Start)/mib))
		}
		row := fmt.Sprintf("round %d: kill at %4d ms, first run wrote %6.1f MiB, open=%v tails(MiB into each segment)=[%s], resume wrote %6.1f MiB, redone %+.1f MiB (bound %d MiB)",
			r, delay.Milliseconds(), float64(sum(prog))/mib, open, strings.Join(tails, " "), float64(b.Total)/mib, float64(redone)/mib, bound/mib)
		table = append(table, row)
		if redone > bound {
			t.Errorf("%s: more than the bound written twice", row)
		}
		if redone < -int64(threads*writerChunk) {
			t.Errorf("%s: less written in total than the file holds, beyond the writes in flight", row)
		}
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds, %d crashed mid-session:\n  %s", rounds, midSession, strings.Join(table, "\n  "))
	if rounds >= 3 && midSession == 0 {
		t.Errorf("no round crashed while the session was open: the kill times miss the session")
	}
}

// TestReadSessionResume: a read session over a 32 MiB file, a reader that
// reads part of two segments, kill -9 of the daemon, remount: the tails
// show the read progress, and a resumed reader reads only the rest.
func TestReadSessionResume(t *testing.T) {
	needMount(t)
	const (
		threads  = 4
		size     = 32 * mib
		seg      = size / threads
		interval = 1 * mib
		limit    = 5*mib + mib/2 // per segment read in the first run
		seed     = 77
	)
	pool := harness.Mkfs(t, "96MiB")
	fs := harness.Mount(t, pool, "--tail-interval", "1MiB")
	file := fs.Path("params.bin")
	logDir := t.TempDir()
	base := []string{"-file", file, "-threads", strconv.Itoa(threads), "-size", strconv.Itoa(size),
		"-seed", strconv.Itoa(seed), "-chunk", strconv.Itoa(writerChunk)}
	startJob(t, filepath.Join(logDir, "w"), append(base, "-no-session")...).wait(t)

	a := startJob(t, filepath.Join(logDir, "a"), append(base, "-mode", "read", "-segments", "0,2", "-limit", strconv.Itoa(limit))...)
	sa := a.wait(t)
	if sa.Resumed || sa.Total != 2*limit || !sa.Open {
		t.Fatalf("first reader: %+v", sa)
	}
	// A read counts once its reply is on its way (ReadData.Done): wait
	// until the tails of the two segments are past (limit - interval) and
	// have stopped moving before the crash.
	deadline := time.Now().Add(5 * time.Second)
	var last []uint64
	for {
		info, ok := getSession(t, file)
		if !ok {
			t.Fatal("the read session closed after a partial read")
		}
		var now []uint64
		for _, sg := range info.Segments {
			now = append(now, sg.Tail-sg.Start)
		}
		if now[0]+interval > limit && now[2]+interval > limit && fmt.Sprint(now) == fmt.Sprint(last) {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("tails still moving or behind after 5 s: %v", now)
			break
		}
		last = now
		time.Sleep(100 * time.Millisecond)
	}
	fs.Kill(t)
	fs.Remount(t)
	info, ok := getSession(t, file)
	if !ok {
		t.Fatal("no session after the crash")
	}
	if info.Mode != "read" || len(info.Segments) != threads {
		t.Fatalf("session after the crash: %+v", info)
	}
	var resumeFrom uint64
	for i, sg := range info.Segments {
		read := uint64(0)
		if i == 0 || i == 2 {
			read = limit
		}
		got := sg.Tail - sg.Start
		switch {
		case read > 0 && (got == 0 || got > read || got+interval <= read):
			t.Errorf("segment %d: tail %d MiB into the segment after reading %.1f MiB of it: want (read - interval, read]", i, got/mib, float64(read)/mib)
		case read == 0 && got != 0:
			t.Errorf("segment %d: tail moved to %d without reads", i, got)
		}
		resumeFrom += sg.Start + sg.Length - sg.Tail
	}
	b := startJob(t, filepath.Join(logDir, "b"), append(base, "-mode", "read", "-resume-only")...)
	sb := b.wait(t)
	if !sb.Resumed {
		t.Fatalf("resumed reader: %+v", sb)
	}
	if sb.Total != resumeFrom {
		t.Errorf("the resumed reader read %d bytes, want only the rest after the tails: %d", sb.Total, resumeFrom)
	}
	// The last reads count when their replies have gone out, which may be
	// just after the reader saw the data: give the session a moment.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, ok := getSession(t, file)
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the read session is still open 5 s after every segment was read to its end: %+v", info)
		}
	}
	t.Logf("tails after the crash (MiB into each segment): %v; the resumed reader read %.1f of %d MiB",
		tailsMiB(info), float64(sb.Total)/mib, size/mib)
}

func tailsMiB(info sessInfo) []string {
	var s []string
	for _, sg := range info.Segments {
		s = append(s, fmt.Sprintf("%.1f", float64(sg.Tail-sg.Start)/mib))
	}
	return s
}

// TestTailIntervalSweep measures, for tail intervals of 1, 4 and 16 MiB,
// the bytes redone after a crash at a fixed point (the writer's count
// passing half of a 256 MiB, 4-thread session) and the throughput of a
// whole session against the same writes without one (into a new file,
// and into a fallocated one, which is what a session's file is). Not a
// pass/fail test: it logs a table. DNNFS_SWEEP=1 runs it;
// DNNFS_SWEEP_REPS (default 3) repetitions, the median is shown.
func TestTailIntervalSweep(t *testing.T) {
	if os.Getenv("DNNFS_SWEEP") != "1" {
		t.Skip("set DNNFS_SWEEP=1 to run the tail-interval sweep")
	}
	needMount(t)
	const (
		threads = 4
		size    = 256 * mib
	)
	reps := max(1, envInt(t, "DNNFS_SWEEP_REPS", 3))
	logDir := t.TempDir()
	median := func(v []float64) float64 {
		sort.Float64s(v)
		return v[len(v)/2]
	}
	span := func(v []float64) string {
		sort.Float64s(v)
		return fmt.Sprintf("%.0f (%.0f-%.0f)", median(v), v[0], v[len(v)-1])
	}
	rows := []string{fmt.Sprintf("%-9s %-24s %-22s %-22s %-22s", "interval", "redone MiB/thread", "session MB/s", "plain MB/s new file", "plain MB/s fallocated")}
	for _, iv := range []int{1, 4, 16} {
		pool := harness.Mkfs(t, "640MiB")
		fs := harness.Mount(t, pool, "--tail-interval", fmt.Sprintf("%dMiB", iv))
		file := fs.Path("w.bin")
		args := func(seed int) []string {
			return []string{"-file", file, "-threads", strconv.Itoa(threads), "-size", strconv.Itoa(size),
				"-seed", strconv.Itoa(seed), "-chunk", strconv.Itoa(writerChunk)}
		}
		var redone, sessR, plainR, preR []float64
		for r := 0; r < reps; r++ {
			// Crash when the writer's count passes half the session.
			logA := filepath.Join(logDir, fmt.Sprintf("i%d-%d-a", iv, r))
			a := startJob(t, logA, args(iv+r)...)
			for sum(progress(logA, threads)) < size/2 {
				select {
				case <-a.done:
					t.Fatalf("interval %d MiB: the writer ended before half: %v %s", iv, a.err, a.stderr.String())
				case <-time.After(time.Millisecond):
				}
			}
			fs.Kill(t)
			a.kill()
			prog := progress(logA, threads)
			fs = fs.Remount(t)
			b := startJob(t, filepath.Join(logDir, fmt.Sprintf("i%d-%d-b", iv, r)), args(iv+r)...).wait(t)
			if !b.Resumed {
				t.Fatalf("interval %d MiB: the second run did not resume", iv)
			}
			compareFile(t, file, uint64(iv+r), size)
			redone = append(redone, float64(int64(sum(prog)+b.Total)-size)/mib/threads)
			os.Remove(file)

			mbs := func(l line) float64 { return float64(l.Total) / 1e6 / l.Seconds }
			sessR = append(sessR, mbs(startJob(t, filepath.Join(logDir, "s"), args(1)...).wait(t)))
			os.Remove(file)
			plainR = append(plainR, mbs(startJob(t, filepath.Join(logDir, "p"), append(args(2), "-no-session")...).wait(t)))
			os.Remove(file)
			f, err := os.Create(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
				t.Fatal(err)
			}
			f.Close()
			preR = append(preR, mbs(startJob(t, filepath.Join(logDir, "q"), append(args(3), "-no-session")...).wait(t)))
			os.Remove(file)
		}
		sort.Float64s(redone)
		rows = append(rows, fmt.Sprintf("%-9s %-24s %-22s %-22s %-22s", fmt.Sprintf("%d MiB", iv),
			fmt.Sprintf("%.2f (%.2f-%.2f)", median(redone), redone[0], redone[len(redone)-1]), span(sessR), span(plainR), span(preR)))
		fs.Unmount(t)
	}
	t.Logf("tail-interval sweep (%d threads, %d MiB, 1 MiB pwrites; crash: kill -9 when the writer's count passed half; "+
		"median (min-max) of %d; daemon %s):\n  %s", threads, size/mib, reps, harness.Binary(t), strings.Join(rows, "\n  "))
}
