package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/lock"
)

// LockMode selects the concurrency control of file data.
type LockMode int

const (
	// LockRange: every read and write locks only its own blocks; size
	// changes lock the whole file (the default).
	LockRange LockMode = iota
	// LockFile: every access locks the whole file (shared for reads,
	// exclusive for writes), as kernel file systems do. Kept as the
	// baseline to measure range locks against.
	LockFile
)

// ParseLockMode reads "range" or "file".
func ParseLockMode(s string) (LockMode, error) {
	switch s {
	case "range":
		return LockRange, nil
	case "file":
		return LockFile, nil
	}
	return 0, fmt.Errorf("lock mode %q: want range or file", s)
}

func (m LockMode) String() string {
	if m == LockFile {
		return "file"
	}
	return "range"
}

// Caller identifies who performs an access: the request's context (ended
// when the kernel interrupts the request), the calling thread and its
// file-system uid and gid. TID 0 is the kernel itself (writeback of a
// shared mapping) or an internal caller.
type Caller struct {
	Ctx      context.Context
	TID      uint32
	UID, GID uint32
	NoAtime  bool // the file was opened O_NOATIME: reads leave atime alone
}

// NoID is the uid and gid of a request that carries none: with ID-mapped
// mounts allowed, the kernel's FUSE client sends ids only with requests
// that create an inode (FUSE_INVALID_UIDGID).
const NoID = ^uint32(0)

// fsIDs returns the caller's file-system uid and gid: the request's, or
// if it has none (NoID) the thread's own from /proc/TID/status.
func (c Caller) fsIDs() (uid, gid uint32) {
	if c.UID != NoID && c.GID != NoID || c.TID == 0 {
		return c.UID, c.GID
	}
	uid, gid = c.UID, c.GID
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(c.TID), 10) + "/status")
	if err != nil {
		return uid, gid
	}
	// "Uid:\treal\teffective\tsaved\tfs"
	if v, ok := statusField(b, "Uid:"); ok && uid == NoID {
		if f := strings.Fields(v); len(f) == 4 {
			if x, err := strconv.ParseUint(f[3], 10, 32); err == nil {
				uid = uint32(x)
			}
		}
	}
	if v, ok := statusField(b, "Gid:"); ok && gid == NoID {
		if f := strings.Fields(v); len(f) == 4 {
			if x, err := strconv.ParseUint(f[3], 10, 32); err == nil {
				gid = uint32(x)
			}
		}
	}
	return uid, gid
}

func (c Caller) ctx() context.Context {
	if c.Ctx == nil {
		return context.Background()
	}
	return c.Ctx
}

// lockData acquires the lock a data access needs: [off, off+n) rounded
// out to blocks (so two writers never share a block being allocated), or
// the whole file when whole is set or the mount uses LockFile.
func (fs *FS) lockData(c Caller, in *Inode, off, n int64, mode lock.Mode, whole bool) (*lock.Lock, error) {
	l := &lock.Lock{TID: c.TID, Mode: mode} // PID: only a session decides by it (else Locks fills it in)
	if s := in.sess.Load(); s != nil && c.TID != 0 {
		l.PID = fs.tgid(c.TID)
		// The session's process (the first to do I/O in it) takes
		// per-thread range locks; any other process is another
		// application and takes the whole-file lock.
		owner := s.owner.Load()
		if l.PID != 0 && (owner == nil || (owner.pid != l.PID && !owner.alive())) {
			// First I/O, or the session's process died and a new one
			// resumes the session: it becomes the session's process.
			s.owner.CompareAndSwap(owner, &process{pid: l.PID, start: processStart(l.PID)})
		}
		if owner := s.owner.Load(); owner == nil || owner.pid != l.PID {
			whole = true
		}
	}
	if whole || fs.lockMode == LockFile {
		l.Start, l.End = 0, lock.Whole
	} else {
		l.Start = uint64(off) / bs * bs
		l.End = (uint64(off) + uint64(n) + bs - 1) / bs * bs // past 2^63-1 for a read near the end
		if l.End == l.Start {
			l.End = l.Start + bs
		}
	}
	giveUp := func() bool { return fatalSignalPending(c.TID) }
	if err := in.locks.Acquire(c.ctx(), l, giveUp); err != nil {
		return nil, ErrInterrupted
	}
	return l, nil
}

// lockWhole takes in's whole-file lock, exclusive, and then in.mu (the
// order of DESIGN.md §Lock order), as a change of the file's size or
// layout by the file system itself needs; unlock releases both. lockData
// fails only when a caller's context ends while it waits and the caller
// is dying: with no caller it waits as long as it takes, so the error is
// never seen, but it is not ignored.
func (fs *FS) lockWhole(in *Inode) (unlock func(), err error) {
	l, err := fs.lockData(Caller{}, in, 0, 0, lock.Exclusive, true)
	if err != nil {
		return nil, err
	}
	in.mu.Lock()
	return func() {
		in.mu.Unlock()
		in.locks.Release(l)
	}, nil
}

// fatalSignalPending reports whether thread tid is being killed: SIGKILL
// pending for the thread or its process (a fatal default-action signal is
// turned into SIGKILL on delivery).
func fatalSignalPending(tid uint32) bool {
	if tid == 0 {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return true // gone
	}
	const sigkill = 1 << (9 - 1)
	for _, key := range []string{"SigPnd:", "ShdPnd:"} {
		i := bytes.Index(b, []byte(key))
		if i < 0 {
			continue
		}
		line := b[i+len(key):]
		if j := bytes.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		v, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 64)
		if err == nil && v&sigkill != 0 {
			return true
		}
	}
	return false
}

// process names a process across pid reuse: its pid and start time.
type process struct {
	pid   uint32
	start uint64 // clock ticks after boot (/proc/PID/stat field 22); 0 if unknown
}

// alive reports whether the process still exists: a process with its pid
// started at its start time (a dead job's pid may be another program's
// by the time the job is resumed, and must not keep the resumer out).
func (p *process) alive() bool {
	start := processStart(p.pid)
	return start != 0 && (p.start == 0 || start == p.start)
}

// processStart returns process pid's start time (0 if it does not exist).
func processStart(pid uint32) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/stat")
	if err != nil {
		return 0
	}
	// After the command name in parentheses (which may hold anything):
	// field 3 (state) onwards; start time is field 22.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// tgidCache maps thread ids to process ids (/proc/TID/status "Tgid:").
// An entry may be stale: thread ids are reused (every pid_max
// allocations, 32768 by default, which a busy machine goes through in
// about a minute), so it is checked before use.
type tgidCache struct {
	mu sync.Mutex
	m  map[uint32]uint32
}

// tgid returns the process of thread tid, which must be alive (the
// caller of a request in flight). A cached entry is used only while tid
// is still a thread of that process: a reused id cached for the process
// that had it before would count a session's own writer as another
// application, whose writes make no progress (DESIGN.md §Two-layer log).
func (fs *FS) tgid(tid uint32) uint32 {
	if tid == 0 {
		return 0
	}
	c := &fs.tgids
	c.mu.Lock()
	p, ok := c.m[tid]
	c.mu.Unlock()
	if ok && p != 0 && threadOf(p, tid) {
		return p
	}
	p = readTgid(tid)
	c.mu.Lock()
	if c.m == nil || len(c.m) > 1<<16 { // thread ids are reused: keep the cache bounded
		c.m = map[uint32]uint32{}
	}
	c.m[tid] = p
	c.mu.Unlock()
	return p
}

// threadOf reports whether thread tid belongs to process pid now:
// tgkill with signal 0 sends nothing and fails with ESRCH exactly when
// no thread tid has thread-group id pid (EPERM still means it has). A
// stat of /proc/PID/task/TID would not do: it exists whenever pid is any
// thread of tid's process, as a reused pid may now be.
func threadOf(pid, tid uint32) bool {
	return !errors.Is(unix.Tgkill(int(pid), int(tid), 0), unix.ESRCH)
}

func readTgid(tid uint32) uint32 {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return 0
	}
	i := bytes.Index(b, []byte("Tgid:"))
	if i < 0 {
		return 0
	}
	line := b[i+5:]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	v, _ := strconv.ParseUint(string(bytes.TrimSpace(line)), 10, 32)
	return uint32(v)
}

// Locks returns the inode's lock queues and counters.
// A lock's PID is looked up here when lockData left it out (no session:
// nothing decides by it there, so requests do not pay for it).
func (in *Inode) Locks() (run, wait []lock.LockInfo, st lock.Stats) {
	run, wait, st = in.locks.Snapshot()
	for _, ls := range [][]lock.LockInfo{run, wait} {
		for i := range ls {
			if ls[i].PID == 0 && ls[i].TID != 0 {
				ls[i].PID = in.fs.tgid(ls[i].TID)
			}
		}
	}
	return run, wait, st
}

// LockMode returns the mount's lock mode.
func (fs *FS) LockMode() LockMode { return fs.lockMode }

// Inodes returns the live inodes (for status).
func (fs *FS) Inodes() []*Inode {
	fs.imu.Lock()
	defer fs.imu.Unlock()
	out := make([]*Inode, 0, len(fs.inodes))
	for _, in := range fs.inodes {
		out = append(out, in)
	}
	return out
}

// LockTotals are the data-lock counters of the whole pool, for metrics.
type LockTotals struct {
	lock.Stats // counters summed over every inode since mount (Max* unused)
	// Running and Waiting are the locks held and queued right now.
	Running, Waiting int
}

// LockTotals sums the lock counters of the live inodes and of those freed
// since mount, so the counters never go back when a file is deleted.
func (fs *FS) LockTotals() LockTotals {
	fs.imu.Lock()
	t := LockTotals{Stats: fs.retired}
	live := make([]*Inode, 0, len(fs.inodes))
	for _, in := range fs.inodes {
		live = append(live, in)
	}
	fs.imu.Unlock()
	// An inode freed from here on is read here and was not in retired
	// above: counted once.
	for _, in := range live {
		run, wait, st := in.locks.Snapshot()
		addLockStats(&t.Stats, st)
		t.Running += len(run)
		t.Waiting += len(wait)
	}
	return t
}

// retireLocksLocked keeps a freed inode's lock counters (in just removed
// from fs.inodes; the lock.File mutex Snapshot takes is a leaf, so taking
// it under fs.imu orders nothing new).
// Precondition: fs.imu is held.
func (fs *FS) retireLocksLocked(in *Inode) {
	_, _, st := in.locks.Snapshot()
	addLockStats(&fs.retired, st)
}

func addLockStats(t *lock.Stats, st lock.Stats) {
	t.Acquired += st.Acquired
	t.Waits += st.Waits
	t.WaitTime += st.WaitTime
	t.Interrupted += st.Interrupted
}
