package core

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/dnnfs/dnnfs/format"
)

// osThread is a goroutine locked to an OS thread of its own, running the
// functions sent to it on that thread.
type osThread struct {
	tid  uint32
	jobs chan func()
}

// startThreads starts n goroutines locked to OS threads and returns them
// once each knows its thread id; stop ends them (a locked goroutine that
// returns takes its thread with it).
func startThreads(n int) (ts []*osThread, stop func()) {
	ready := make(chan *osThread)
	for range n {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			th := &osThread{tid: uint32(syscall.Gettid()), jobs: make(chan func())}
			ready <- th
			for f := range th.jobs {
				f()
			}
		}()
	}
	for range n {
		ts = append(ts, <-ready)
	}
	return ts, func() {
		for _, th := range ts {
			close(th.jobs)
		}
	}
}

// run calls f on the thread and waits for it.
func (th *osThread) run(f func()) {
	done := make(chan struct{})
	th.jobs <- func() { f(); close(done) }
	<-done
}

// threadReusing returns a new thread of this process whose id is tid, a
// process that exited (pid == tid): the kernel hands out ids in order
// from ns_last_pid + 1, and a busy machine's id space (pid_max, 32768 by
// default) wraps within minutes, so a new thread with the id of a
// process seen before is ordinary. The test forces what otherwise takes
// a wrap; another process forking in between takes the id first, so it
// retries. The thread is stopped at the test's end.
func threadReusing(t *testing.T, tid uint32) *osThread {
	t.Helper()
	for range 50 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(int(tid)-1)), 0); err != nil {
			t.Skipf("needs root to choose the next thread id (ns_last_pid): %v", err)
		}
		ts, stop := startThreads(8) // idle threads of the runtime run some: more than one is new
		for _, th := range ts {
			if th.tid == tid {
				t.Cleanup(stop)
				return th
			}
		}
		stop()
	}
	t.Skipf("no new thread got id %d: other processes keep taking it", tid)
	return nil
}

// TestSessionProgressAfterThreadIDReuse: a session's writer thread whose
// id belonged to another process that did I/O on the pool before (thread
// ids are reused) is still the session's process: its pieces move its
// segment's tail and the session closes when every segment is written.
// The daemon remembered the id's old process and counted the writer as
// another application: the pwrites succeeded, the tail stayed at the
// segment's start, and the session never closed (dnnfs.torch.save, with
// its writer threads pausing between pieces, saw it in 2 of 21 saves).
func TestSessionProgressAfterThreadIDReuse(t *testing.T) {
	fs, _ := openTestPool(t)
	root := fs.Root()
	in, err := fs.Create(root, "ckpt", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	const seg, piece = 256 << 10, 40 << 10 // pieces not block-aligned, the last one short
	if err := fs.StartSession(in, 2, 2*seg, format.SessionWrite); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 2*seg)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	pieces := func(start int) (offs []int) {
		for off := start; off < start+seg; off += piece {
			offs = append(offs, off)
		}
		return offs
	}
	first, second := pieces(0), pieces(seg)
	ts, stop := startThreads(1)
	defer stop()
	owner := ts[0]
	write := func(th *osThread, off, end int) {
		n := min(piece, end-off)
		th.run(func() {
			if _, err := fs.WriteAs(Caller{TID: th.tid}, in, int64(off), want[off:off+n], false); err != nil {
				t.Errorf("write [%d, %d) by thread %d: %v", off, off+n, th.tid, err)
			}
		})
	}
	// The session's process starts: its first piece makes it the owner.
	write(owner, first[0], seg)

	// Another program reads the file (its thread id is its pid), then exits.
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	otherTID := uint32(other.Process.Pid)
	rd, err := fs.ReadAs(Caller{TID: otherTID}, in, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	rd.Done()
	_ = other.Process.Kill()
	_ = other.Wait()

	// The session's process starts its second writer: it gets that id.
	reused := threadReusing(t, otherTID)

	// Both write their segments in pieces, taking turns: each pauses
	// between its pieces while the other writes.
	for i, off := range second {
		if i+1 < len(first) {
			write(owner, first[i+1], seg)
		}
		write(reused, off, 2*seg)
	}
	if t.Failed() {
		return
	}
	if info, open := fs.Session(in); open {
		t.Fatalf("every byte written, yet the session is still open: %+v", info.Segments)
	}
	rd, err = fs.Read(in, 0, 2*seg)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Done()
	if got := bytes.Join(rd.Slices, nil); !bytes.Equal(got, want) {
		t.Fatal("the file's bytes differ from what was written")
	}
}

// processReusing starts `sleep 60` as a process whose pid is pid (a
// process that exited), retrying as threadReusing does, and until it
// starts in a later clock tick than the exited one (start times count
// ticks: a real reuse comes a wrap of the pid space later); it is killed
// at the test's end.
func processReusing(t *testing.T, pid int, exitedStart uint64) {
	t.Helper()
	for range 500 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Skipf("needs root to choose the next pid (ns_last_pid): %v", err)
		}
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid && processStart(uint32(pid)) != exitedStart {
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			return
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	t.Skipf("no new process got pid %d: other processes keep taking it", pid)
}

// TestSessionResumedAfterPidReuse: a job that dies mid-session is resumed
// by a new process, which becomes the session's process even when the
// dead job's pid belongs to an unrelated program by then (pids wrap
// within minutes on a busy machine): its writes move the tails and the
// session closes. Taking any process with the dead job's pid for the
// job kept the resumer an outsider whose writes never counted.
func TestSessionResumedAfterPidReuse(t *testing.T) {
	fs, _ := openTestPool(t)
	in, err := fs.Create(fs.Root(), "ckpt", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 10
	if err := fs.StartSession(in, 1, size, format.SessionWrite); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("resumed "), size/8)
	// The job: its first write makes it the session's process; it dies.
	job := exec.Command("sleep", "60")
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	jobPid := job.Process.Pid
	jobStart := processStart(uint32(jobPid))
	if _, err := fs.WriteAs(Caller{TID: uint32(jobPid)}, in, 0, want[:4096], false); err != nil {
		t.Fatal(err)
	}
	_ = job.Process.Kill()
	_ = job.Wait()
	processReusing(t, jobPid, jobStart) // an unrelated program gets its pid

	// The resumed job (this process) writes the segment again, in pieces.
	ts, stop := startThreads(1)
	defer stop()
	th := ts[0]
	for off := 0; off < size; off += 12 << 10 {
		end := min(off+12<<10, size)
		th.run(func() {
			if _, err := fs.WriteAs(Caller{TID: th.tid}, in, int64(off), want[off:end], false); err != nil {
				t.Errorf("write [%d, %d): %v", off, end, err)
			}
		})
	}
	if info, open := fs.Session(in); open {
		t.Fatalf("every byte written by the resumed job, yet the session is still open: %+v", info.Segments)
	}
}
