package lock

import (
	"context"
	"sync"
	"time"
)

// Mode of a lock.
type Mode uint8

const (
	Shared    Mode = iota // reads
	Exclusive             // writes and size changes
)

func (m Mode) String() string {
	if m == Exclusive {
		return "exclusive"
	}
	return "shared"
}

// Whole is the End of a whole-file lock ([0, Whole)).
const Whole = ^uint64(0)

// Lock is one thread's lock on [Start, End) of a file.
type Lock struct {
	TID   uint32 // accessing thread (FUSE request header)
	PID   uint32 // its process, when known
	Start uint64
	End   uint64
	Mode  Mode
	Next  *Lock // next lock in the same queue

	since   time.Time
	ready   chan struct{} // closed when the lock moves to the run queue
	running bool
	bypass  int // whole-file waiters: locks granted while this one waited
}

// IsWhole reports whether l covers the whole file.
func (l *Lock) IsWhole() bool { return l.Start == 0 && l.End == Whole }

func (l *Lock) conflicts(o *Lock) bool {
	if l.Mode == Shared && o.Mode == Shared {
		return false
	}
	return l.Start < o.End && o.Start < l.End
}

// Stats are a file's lock counters.
type Stats struct {
	Acquired     uint64        // locks granted
	Waits        uint64        // locks that had to wait
	WaitTime     time.Duration // total time waited
	Interrupted  uint64        // waits abandoned (caller interrupted)
	MaxRunning   int           // most locks running at once
	MaxExclusive int           // most exclusive (write) locks running at once
	MaxBypass    int           // most locks granted while one whole-file lock waited (FIFO bounds it by the queue ahead of it)
}

// File is the lock state of one open file: run queue, wait queue, stats.
// The zero value is ready to use.
type File struct {
	mu          sync.Mutex // guards the queues, counts and stats; *Locked methods expect it held
	run, wait   *Lock      // queue heads
	nrun, nexcl int
	stats       Stats
}

// Acquire puts l on the run queue, or on the wait queue until it can run.
// When ctx ends first, giveUp decides: true (or giveUp nil) abandons the
// wait, l leaves the queue and ctx.Err() is returned; false keeps waiting.
// (FUSE interrupts a request for any signal of the caller; dnnfs gives up
// only for fatal ones, so a job's pwrite never fails with a spurious EINTR.)
func (f *File) Acquire(ctx context.Context, l *Lock, giveUp func() bool) error {
	l.Next, l.running, l.bypass = nil, false, 0
	f.mu.Lock()
	if f.canRunLocked(l, nil) {
		f.pushRunLocked(l)
		f.mu.Unlock()
		return nil
	}
	l.since = time.Now()
	l.ready = make(chan struct{})
	f.appendWaitLocked(l)
	f.stats.Waits++
	f.mu.Unlock()

	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	select {
	case <-l.ready:
		return nil
	case <-done:
	}
	if giveUp != nil && !giveUp() {
		<-l.ready
		return nil
	}
	f.mu.Lock()
	if l.running { // granted while we gave up: keep the grant's accounting straight
		f.mu.Unlock()
		f.Release(l)
	} else {
		f.removeWaitLocked(l)
		f.stats.Interrupted++
		// Locks behind l may have waited only for it.
		f.grantLocked()
		f.mu.Unlock()
	}
	return ctx.Err()
}

// TryAcquire takes l only if it can run now.
func (f *File) TryAcquire(l *Lock) bool {
	l.Next, l.running = nil, false
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.canRunLocked(l, nil) {
		return false
	}
	f.pushRunLocked(l)
	return true
}

// Release takes l off the run queue and wakes the waiters that can now run.
func (f *File) Release(l *Lock) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var prev *Lock
	for c := f.run; c != nil; prev, c = c, c.Next {
		if c == l {
			if prev == nil {
				f.run = c.Next
			} else {
				prev.Next = c.Next
			}
			break
		}
	}
	l.Next = nil
	l.running = false
	f.nrun--
	if l.Mode == Exclusive {
		f.nexcl--
	}
	f.grantLocked()
}

// canRunLocked: no conflict with a running lock, nor with a waiter ahead of
// l (stop is l's own position in the wait queue; nil = l is not waiting,
// so every waiter is ahead).
func (f *File) canRunLocked(l, stop *Lock) bool {
	for c := f.run; c != nil; c = c.Next {
		if l.conflicts(c) {
			return false
		}
	}
	for c := f.wait; c != nil && c != stop; c = c.Next {
		if l.conflicts(c) {
			return false
		}
	}
	return true
}

func (f *File) pushRunLocked(l *Lock) {
	l.Next = f.run
	f.run = l
	l.running = true
	f.nrun++
	if l.Mode == Exclusive {
		f.nexcl++
	}
	f.stats.Acquired++
	f.stats.MaxRunning = max(f.stats.MaxRunning, f.nrun)
	f.stats.MaxExclusive = max(f.stats.MaxExclusive, f.nexcl)
	// Fairness accounting: grants while whole-file locks wait.
	if l.IsWhole() {
		f.stats.MaxBypass = max(f.stats.MaxBypass, l.bypass)
	}
	for c := f.wait; c != nil; c = c.Next {
		if c.IsWhole() && c.conflicts(l) { // a compatible reader passing it costs it nothing
			c.bypass++
		}
	}
}

func (f *File) appendWaitLocked(l *Lock) {
	if f.wait == nil {
		f.wait = l
		return
	}
	c := f.wait
	for c.Next != nil {
		c = c.Next
	}
	c.Next = l
}

func (f *File) removeWaitLocked(l *Lock) {
	var prev *Lock
	for c := f.wait; c != nil; prev, c = c, c.Next {
		if c == l {
			if prev == nil {
				f.wait = c.Next
			} else {
				prev.Next = c.Next
			}
			l.Next = nil
			return
		}
	}
}

// grantLocked moves every waiter that can now run to the run queue, in
// queue order, and wakes it.
func (f *File) grantLocked() {
	var prev *Lock
	c := f.wait
	for c != nil {
		next := c.Next
		if f.canRunLocked(c, c) {
			if prev == nil {
				f.wait = next
			} else {
				prev.Next = next
			}
			f.stats.WaitTime += time.Since(c.since)
			f.pushRunLocked(c)
			close(c.ready)
		} else {
			prev = c
		}
		c = next
	}
}

// LockInfo describes one queued lock.
type LockInfo struct {
	TID, PID   uint32
	Start, End uint64
	Mode       Mode
	Since      time.Time // zero for locks that never waited
}

// Snapshot returns the queues (run first) and the counters.
func (f *File) Snapshot() (run, wait []LockInfo, st Stats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info := func(l *Lock) LockInfo {
		return LockInfo{TID: l.TID, PID: l.PID, Start: l.Start, End: l.End, Mode: l.Mode, Since: l.since}
	}
	for c := f.run; c != nil; c = c.Next {
		run = append(run, info(c))
	}
	for c := f.wait; c != nil; c = c.Next {
		wait = append(wait, info(c))
	}
	return run, wait, f.stats
}

// Busy reports whether any lock is running or waiting.
func (f *File) Busy() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.run != nil || f.wait != nil
}
