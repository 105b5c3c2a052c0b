// Package lockload_test checks dnnfs's per-thread byte-range locks end to
// end: real processes with several OS threads doing pread/pwrite through a
// real mount (tests/lockload/writer), with the lock counters read back from
// the virtual xattr user.dnnfs.locks.
//
// Run with:
//
//	mkdir -p /dev/shm/dnnfs-test
//	TMPDIR=/dev/shm/dnnfs-test go test -race -count=1 ./tests/lockload/
//
// DNNFS_BIN selects a prebuilt daemon (else the harness builds one with
// -race). LOCKLOAD_SEED fixes the random seed of the load (it is logged).
//
// No test has a timing threshold: waits are bounded only to turn a
// deadlock or a starvation into a failure with the lock queues dumped.
package lockload_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	dfs "github.com/dnnfs/dnnfs/fs"
	"github.com/dnnfs/dnnfs/tests/harness"
	"github.com/dnnfs/dnnfs/tests/lockload/pattern"
)

func seed(t *testing.T) uint64 {
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("LOCKLOAD_SEED"); v != "" {
		var err error
		if s, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("LOCKLOAD_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (LOCKLOAD_SEED=%d reproduces the load)", s, s)
	return s
}

// ---------------------------------------------------------------------------
// Torn writes

// TestTornWrites: 3 writer processes × 4 threads write requests of one or
// two whole 64 KiB units (half of them inside an 8-unit hot region, so
// writers overlap constantly) to a preallocated 16 MiB file, while 4
// reader threads pread one or two whole units at a time. Every 4 KiB chunk
// names the request that wrote it and carries a CRC (package pattern).
//
// Under range locks a write covers its whole units exclusively and a read
// its whole units shared, so a reader must never see a unit mixing two
// requests (or a torn chunk), and in the end every unit holds one
// request's complete pattern: the last request of its writer that covered
// it, or a later one of another writer — never an older one of the same
// writer (a lost write), never the initial fill if anyone wrote it.
func TestTornWrites(t *testing.T) {
	const (
		fileSize = 16 << 20
		units    = fileSize / pattern.UnitSize
		procs    = 3
		threads  = 4
		hot      = 8
	)
	requests := 120
	if testing.Short() {
		requests = 40
	}
	sd := seed(t)
	fs := mount(t, "64MiB")
	path := fs.Path("torn")
	t0 := time.Now()
	writeFragmented(t, path, fileSize)
	t.Logf("fragmented file written in %v", time.Since(t0))

	reader := start(t, "reader", "torn-read", "-file", path, "-threads", "4", "-hot", strconv.Itoa(hot), "-seed", strconv.FormatUint(sd, 10))
	logDir := t.TempDir()
	var writers []*proc
	for p := range procs {
		writers = append(writers, start(t, fmt.Sprintf("writer %d", p), "torn-write",
			"-file", path, "-proc", strconv.Itoa(p), "-threads", strconv.Itoa(threads),
			"-requests", strconv.Itoa(requests), "-hot", strconv.Itoa(hot),
			"-seed", strconv.FormatUint(sd, 10), "-log", filepath.Join(logDir, fmt.Sprintf("w%d", p))))
	}
	for _, w := range writers {
		// A reader that found a torn unit exits at once: fail then.
		select {
		case <-w.done:
		case <-reader.done:
			t.Fatalf("the reader exited while writers ran (%v)\n%s", reader.err, reader.output())
		case <-time.After(hangTimeout):
		}
		w.wait(t, path)
	}
	if reader.exited() {
		t.Fatalf("the reader exited while writers ran (%v)\n%s", reader.err, reader.output())
	}
	reader.closeStdin()
	reader.wait(t, path)
	t.Logf("reader: %s", strings.TrimSpace(reader.waitLine(t, "reads ")))

	// The final contents, against the writers' logs.
	type req struct{ unit, units uint32 }
	logs := map[uint32]map[uint32]req{} // writer -> seq -> request
	lastCover := map[[2]uint32]uint32{} // (writer, unit) -> last seq covering it
	covered := make([]bool, units)
	for p := range procs {
		b, err := os.ReadFile(filepath.Join(logDir, fmt.Sprintf("w%d", p)))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		n := 0
		for sc.Scan() {
			var w, s, u, k uint32
			if _, err := fmt.Sscan(sc.Text(), &w, &s, &u, &k); err != nil {
				t.Fatalf("log line %q: %v", sc.Text(), err)
			}
			if logs[w] == nil {
				logs[w] = map[uint32]req{}
			}
			logs[w][s] = req{u, k}
			for i := u; i < u+k; i++ {
				lastCover[[2]uint32{w, i}] = max(lastCover[[2]uint32{w, i}], s)
				covered[i] = true
			}
			n++
		}
		if n != threads*requests {
			t.Fatalf("writer %d logged %d requests, want %d", p, n, threads*requests)
		}
	}
	final, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(final) != fileSize {
		t.Fatalf("file size %d, want %d", len(final), fileSize)
	}
	owners := map[uint32]int{}
	for u := uint32(0); u < units; u++ {
		r, err := pattern.CheckUnit(final[u*pattern.UnitSize:(u+1)*pattern.UnitSize], u)
		if err != nil {
			t.Fatalf("final contents: %v", err)
		}
		owners[r.Writer]++
		if r.Writer == 0 {
			if covered[u] {
				t.Errorf("unit %d still holds the initial fill although requests covered it (lost write)", u)
			}
			continue
		}
		lr, ok := logs[r.Writer][r.Seq]
		if !ok || lr.unit != r.ReqUnit || lr.units != r.ReqUnits {
			t.Errorf("unit %d holds %s, which no writer logged (logged: %+v, %v)", u, r, lr, ok)
			continue
		}
		if last := lastCover[[2]uint32{r.Writer, u}]; last != r.Seq {
			t.Errorf("unit %d holds %s but writer %d wrote it again later (seq %d): lost write", u, r, r.Writer, last)
		}
	}
	t.Logf("final owners of the %d units (writer: units): %v", units, owners)

	st := drained(t, path)
	t.Logf("locks: %+v", st.Stats)
	if len(st.Run) != 0 || len(st.Wait) != 0 {
		t.Errorf("queues not empty 5 s after all processes ended: run %v wait %v", st.Run, st.Wait)
	}
	if st.Stats.Waits == 0 {
		t.Fatalf("no lock ever waited: the overlapping writers did not contend, the test proves nothing\n%+v", st.Stats)
	}
}

// writeFragmented creates path with the initial fill (writer 0) written
// one piece (16 KiB) at a time from the end of the file to its start, so
// that every piece gets its own extent in the pool.
//
// Why: on an emulated pool (a pool file, as in these tests) each
// physically contiguous piece of a request is stored with one pwrite into
// the pool file, which the kernel applies atomically under that file's own
// inode lock; that would hide the tearing broken range locks cause on a
// real DAX pool, where the data is stored with a plain memory copy. With
// one extent per 16 KiB, a unit is stored in 4 pieces and two writers of
// the same unit can interleave, as with a memory copy. (Smaller pieces
// make the extent lists long and every write slow.) (Writing backwards defeats the
// allocator's goal of placing a block right after its logical
// predecessor; the file is not extended by the writes after the first, so
// they are parallel direct writes like the test's.)
func writeFragmented(t *testing.T, path string, size int) {
	t.Helper()
	initial := make([]byte, size)
	pattern.FillRequest(initial, 0, 0, 0, uint32(size/pattern.UnitSize))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	const piece = 16 << 10
	for off := size - piece; off >= 0; off -= piece {
		if n, err := unix.Pwrite(fd, initial[off:off+piece], int64(off)); err != nil || n != piece {
			t.Fatalf("pwrite at %d: n=%d err=%v", off, n, err)
		}
	}
}

// ---------------------------------------------------------------------------
// Parallelism

// TestParallelism: 4 threads write disjoint 64 MiB segments of a
// preallocated 256 MiB file with 1 MiB pwrites. With --lock=range the
// daemon must run writes concurrently (max_concurrent_writes > 1); with
// --lock=file exactly one at a time although writes did arrive together
// (waits > 0). On 2 cores two writes may or may not overlap in a given
// pass: passes repeat until they do, a bounded number of times.
func TestParallelism(t *testing.T) {
	const (
		threads   = 4
		seg       = 64 << 20
		fileSize  = threads * seg
		ioSize    = 1 << 20
		maxPasses = 12
	)
	pool := harness.Mkfs(t, "320MiB")
	for _, mode := range []string{"range", "file"} {
		t.Run(mode, func(t *testing.T) {
			t0 := time.Now()
			fs := harness.Mount(t, pool, "--lock="+mode)
			path := fs.Path("params")
			preallocate(t, path, fileSize) // (a no-op on the second mount)
			t.Logf("mounted and preallocated in %v", time.Since(t0))
			t0 = time.Now()
			var st = locks(t, path)
			if st.LockMode != mode {
				t.Fatalf("lock_mode %q, want %q", st.LockMode, mode)
			}
			pass := 0
			for pass < maxPasses {
				pass++
				w := start(t, fmt.Sprintf("seg-write pass %d", pass), "seg-write", "-file", path,
					"-threads", strconv.Itoa(threads), "-seg", strconv.Itoa(seg), "-io", strconv.Itoa(ioSize), "-pass", strconv.Itoa(pass))
				w.wait(t, path)
				st = locks(t, path)
				if mode == "range" && st.Stats.MaxWrites > 1 || mode == "file" && st.Stats.Waits > 0 {
					break
				}
			}
			t.Logf("--lock=%s after %d passes (%v): %+v", mode, pass, time.Since(t0), st.Stats)
			t0 = time.Now()
			switch mode {
			case "range":
				if st.Stats.MaxWrites <= 1 {
					t.Fatalf("--lock=range: max_concurrent_writes = %d after %d passes of 4 threads writing disjoint segments: writes never ran in parallel", st.Stats.MaxWrites, pass)
				}
			case "file":
				if st.Stats.MaxWrites != 1 {
					t.Fatalf("--lock=file: max_concurrent_writes = %d, want exactly 1", st.Stats.MaxWrites)
				}
				if st.Stats.Waits == 0 {
					t.Fatalf("--lock=file: no write ever waited in %d passes: writes never arrived together, so max_concurrent_writes = 1 proves nothing", pass)
				}
			}
			if st.Stats.MaxRunning < st.Stats.MaxWrites {
				t.Errorf("max_running %d < max_concurrent_writes %d", st.Stats.MaxRunning, st.Stats.MaxWrites)
			}
			// Contents: every 1 MiB block is its thread's, from the last pass
			// (all of it after the parallel writes of --lock=range, the
			// headers after --lock=file).
			check := ioSize
			if mode == "file" {
				check = 4 << 10
			}
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if fd >= 0 {
					unix.Close(fd)
				}
			}()
			buf := make([]byte, check)
			for off := int64(0); off < fileSize; off += ioSize {
				if n, err := unix.Pread(fd, buf, off); err != nil || n != check {
					t.Fatalf("pread at %d: n=%d err=%v", off, n, err)
				}
				th := byte(off/seg + 1)
				if o, p := binary.LittleEndian.Uint64(buf), binary.LittleEndian.Uint64(buf[8:]); o != uint64(off) || p != uint64(pass) {
					t.Fatalf("block at %d: header (offset %d, pass %d), want (%d, %d)", off, o, p, off, pass)
				}
				if i := bytes.IndexFunc(buf[16:], func(r rune) bool { return r != rune(th) }); i >= 0 {
					t.Fatalf("block at %d: byte %d is %#x, want %#x (thread %d)", off, 16+i, buf[16+i], th, th)
				}
			}
			unix.Close(fd)
			fd = -1
			t.Logf("contents checked in %v", time.Since(t0))
			fs.Unmount(t)
		})
		if t.Failed() {
			return
		}
	}
}

// ---------------------------------------------------------------------------
// Whole-file fairness

// TestWholeFileFairness: 8 threads keep writing (and reading back)
// disjoint 2 MiB regions of a file, 4 more threads keep reading other
// disjoint regions, while another process ftruncates the file to its
// current size (a size change: the whole-file lock) N times. The
// truncations must all complete while the threads keep running (no
// starvation), and no whole-file lock may be passed by more locks than
// were queued ahead of it (FIFO): at most one per thread, since each
// thread has at most one request in flight (sync direct I/O).
//
// Why readers: the kernel itself serialises a size change against writes
// (ftruncate holds the inode's i_rwsem exclusively, a non-extending
// parallel direct write holds it shared until the daemon answers), so
// writes never meet a whole-file lock in the daemon, and a writing thread
// blocks in the kernel at its next write. Direct reads take no inode lock
// in the kernel: a stream of them is what the daemon's FIFO must order
// against the whole-file lock (without FIFO the read-only threads pass a
// waiting whole-file lock at will). waits > 0 shows that locks met: the
// threads' ranges are disjoint and each thread is sequential, so every
// wait involves the whole-file lock.
func TestWholeFileFairness(t *testing.T) {
	const (
		writers   = 8
		readers   = 4
		threads   = writers + readers
		region    = 2 << 20
		fileSize  = threads * region
		truncates = 150
		maxRounds = 8
	)
	sd := seed(t)
	fs := mount(t, "64MiB")
	path := fs.Path("params")
	preallocate(t, path, fileSize)
	rw := start(t, "range-rw", "range-rw", "-file", path, "-threads", strconv.Itoa(writers), "-readers", strconv.Itoa(readers),
		"-region", strconv.Itoa(region), "-io", strconv.Itoa(64<<10), "-seed", strconv.FormatUint(sd, 10))
	rw.waitLine(t, "ready")
	before := locks(t, path).Stats
	round, done := 0, 0
	var st = locks(t, path)
	for round < maxRounds {
		round++
		tr := start(t, fmt.Sprintf("truncate round %d", round), "truncate", "-file", path, "-n", strconv.Itoa(truncates))
		tr.wait(t, path)
		if l := tr.waitLine(t, "truncated "); l != fmt.Sprintf("truncated %d times", truncates) {
			t.Fatalf("truncate: %q", l)
		}
		done += truncates
		if rw.exited() {
			t.Fatalf("the range-rw threads stopped while the truncations ran (%v)\n%s", rw.err, rw.output())
		}
		st = locks(t, path)
		if st.Stats.Waits > before.Waits {
			break
		}
	}
	rw.closeStdin()
	rw.wait(t, path)
	t.Logf("range-rw: %s", strings.TrimSpace(rw.waitLine(t, "writes ")))
	st = locks(t, path)
	t.Logf("%d truncations in %d rounds; locks: %+v", done, round, st.Stats)
	if got := st.Stats.Acquired - before.Acquired; got < uint64(done) {
		t.Errorf("acquired grew by %d, less than the %d truncations", got, done)
	}
	if st.Stats.Waits == before.Waits {
		t.Fatalf("after %d truncations no lock waited: whole-file and range locks never met in the daemon, the test proves nothing", done)
	}
	if st.Stats.MaxBypass > threads {
		t.Fatalf("max_grants_while_whole_file_waited = %d > %d: a whole-file lock was passed by more locks than the threads could have queued ahead of it", st.Stats.MaxBypass, threads)
	}
	if st := drained(t, path); len(st.Run) != 0 || len(st.Wait) != 0 {
		t.Errorf("queues not empty 5 s after the end: run %v wait %v", st.Run, st.Wait)
	}
}

// ---------------------------------------------------------------------------
// Interrupted waits

// TestInterruptedWait: a thread whose read waits in the daemon's wait
// queue is signalled.
//
// Userspace cannot hold a dnnfs lock for long: locks are taken inside the
// daemon for the duration of one request's copy, after the kernel has the
// data. What comes closest is a stream of extending 1 MiB writes (each holds
// the whole-file lock while it allocates and copies): a reader of offset 0
// spends much of its time in the wait queue behind them. The test polls
// user.dnnfs.locks until it sees the reader's thread id in the wait queue
// and signals it then.
//
//   - SIGUSR1 (caught): the kernel sends FUSE_INTERRUPT, the daemon must not
//     give up (only fatal signals make it), so pread must never fail with
//     EINTR and stats.interrupted must not grow.
//   - SIGKILL: the daemon must abandon the wait (stats.interrupted grows) and
//     the dying thread's lock must leave the queue.
//
// Whether the signal lands while the lock still waits is up to the
// scheduler; attempts repeat a bounded number of times, and the test skips
// (it does not fail) when the window was never hit.
func TestInterruptedWait(t *testing.T) {
	fs := mount(t, "128MiB")
	path := fs.Path("grow")
	if err := os.WriteFile(path, bytes.Repeat([]byte{1}, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	ext := start(t, "extender", "extend", "-file", path, "-io", strconv.Itoa(1<<20), "-max", strconv.Itoa(16<<20))
	defer func() {
		ext.closeStdin()
		ext.wait(t, path)
	}()
	// waiting reports whether thread tid of process pid waits, and checks
	// its lock: the tuple (tid, pid, start, end) of a 4 KiB read at 0.
	waiting := func(t *testing.T, pid int, tid uint32) (bool, uint64) {
		st := locks(t, path)
		for _, l := range st.Wait {
			if l.TID == tid {
				if l.PID != uint32(pid) || l.Start != 0 || l.End != 4096 || l.Whole || l.Mode != "shared" || l.WaitingSince == "" {
					t.Errorf("the reader's waiting lock is %+v, want tid %d pid %d [0,4096) shared with waiting_since", l, tid, pid)
				}
				return true, st.Stats.Interrupted
			}
		}
		return false, st.Stats.Interrupted
	}
	readerTID := func(t *testing.T, p *proc) uint32 {
		var tid uint32
		if _, err := fmt.Sscanf(p.waitLine(t, "tid "), "tid %d", &tid); err != nil {
			t.Fatal(err)
		}
		return tid
	}

	t.Run("SIGUSR1", func(t *testing.T) {
		const want, maxPolls = 20, 20000
		rd := start(t, "sig-read", "sig-read", "-file", path)
		tid := readerTID(t, rd)
		before := locks(t, path).Stats.Interrupted
		sent := 0
		for polls := 0; sent < want && polls < maxPolls; polls++ {
			if w, _ := waiting(t, rd.cmd.Process.Pid, tid); w {
				if err := unix.Tgkill(rd.cmd.Process.Pid, int(tid), unix.SIGUSR1); err != nil {
					t.Fatalf("tgkill: %v", err)
				}
				sent++
			}
		}
		rd.closeStdin()
		rd.wait(t, path) // exit 0: no pread failed (EINTR)
		t.Logf("%d SIGUSR1 sent while the read waited; reader: %s", sent, strings.TrimSpace(rd.waitLine(t, "reads ")))
		if after := locks(t, path).Stats.Interrupted; after != before {
			t.Fatalf("stats.interrupted grew from %d to %d: the daemon gave up a wait for a non-fatal signal", before, after)
		}
		if sent == 0 {
			t.Skip("never saw the reader in the wait queue: nothing tested")
		}
	})

	t.Run("SIGKILL", func(t *testing.T) {
		const attempts, maxPolls = 60, 20000
		hit, killedWaiting := 0, 0
		for a := 0; a < attempts && hit == 0; a++ {
			rd := start(t, fmt.Sprintf("sig-read %d", a), "sig-read", "-file", path)
			tid := readerTID(t, rd)
			var before uint64
			seen := false
			for polls := 0; polls < maxPolls && !seen; polls++ {
				seen, before = waiting(t, rd.cmd.Process.Pid, tid)
			}
			if seen {
				killedWaiting++
			}
			_ = rd.cmd.Process.Kill()
			select {
			case <-rd.done:
			case <-time.After(hangTimeout):
				t.Fatalf("killed reader did not exit within %v: its request is stuck\nlocks: %s", hangTimeout, rawLocks(path))
			}
			// Its lock leaves the queues (a granted read releases its lock
			// just after the reply, which may be after the process died).
			var st dfs.LocksJSON
			waitFor(t, "the killed reader's lock to leave the queues", func() bool {
				st = locks(t, path)
				for _, l := range append(st.Run, st.Wait...) {
					if l.TID == tid {
						return false
					}
				}
				return true
			}, func() string { return rawLocks(path) })
			if seen && st.Stats.Interrupted > before {
				hit++
			}
		}
		t.Logf("%d readers killed while waiting, %d waits abandoned", killedWaiting, hit)
		switch {
		case hit > 0:
		case killedWaiting >= 30:
			// A kill right after the read was seen waiting abandons the wait
			// about every other time on a 2-core machine (the rest were
			// granted first); never in 30 tries means the daemon ignores
			// fatal signals while waiting.
			t.Fatalf("%d readers were SIGKILLed while seen in the wait queue and not one wait was abandoned (stats.interrupted never grew)", killedWaiting)
		default:
			t.Skipf("no SIGKILL landed while the read still waited (%d attempts, %d seen waiting)", attempts, killedWaiting)
		}
	})
}
