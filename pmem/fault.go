package pmem

import (
	"errors"
	"fmt"
	"sync"
)

// ErrInjected is a panic value for crash callbacks: recover can tell an
// injected crash from a real failure.
var ErrInjected = errors.New("pmem: injected fault")

// Faulty wraps a Medium to inject faults: a crash after a chosen fence
// (wrap a Recorder to get the crash image too) and failing flushes. It
// changes nothing until armed.
//
// A failed Flush (or Persist) writes nothing back: the underlying medium
// never sees it, so over a Recorder the bytes stay undurable, as they would
// on media whose write-back failed.
type Faulty struct {
	Medium

	mu              sync.Mutex
	fences, crashAt int
	crash           func()

	ranges    []faultRange // flushes overlapping one fail
	skip      int          // FailFlushes: flushes to let through first,
	failCount int          // then how many to fail
	countErr  error
	wbErr     error  // InjectWritebackError: the next flush of any range fails
	wbErrs    uint64 // writeback errors injected (WritebackErrors)
	failed    int    // flushes failed so far
}

type faultRange struct {
	off, end int64
	err      error
}

// NewFaulty wraps m.
func NewFaulty(m Medium) *Faulty { return &Faulty{Medium: m} }

// CrashAfterFences arranges for fn to be called once, right after the n-th
// fence (counting Fence and Persist calls since NewFaulty) has reached the
// underlying medium. fn typically panics with ErrInjected to stop the code
// under test dead.
func (f *Faulty) CrashAfterFences(n int, fn func()) {
	f.mu.Lock()
	f.crashAt, f.crash = n, fn
	f.mu.Unlock()
}

// Fences returns how many fences have passed through f.
func (f *Faulty) Fences() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fences
}

// FailFlushRange makes every Flush and Persist overlapping [off, off+n)
// fail with err, until Heal: a range of media that no longer takes
// writes.
func (f *Faulty) FailFlushRange(off, n int64, err error) {
	f.mu.Lock()
	f.ranges = append(f.ranges, faultRange{off, off + n, err})
	f.mu.Unlock()
}

// FailFlushes lets the next skip Flush/Persist calls through and makes
// the count after them fail with err, whatever their range.
func (f *Faulty) FailFlushes(skip, count int, err error) {
	f.mu.Lock()
	f.skip, f.failCount, f.countErr = skip, count, err
	f.mu.Unlock()
}

// InjectWritebackError models the kernel's report of a background
// write-back failure of the pool file: the next Flush of any range fails
// with err, and WritebackErrors counts it. Which bytes were lost is
// unknown to the caller, as with msync.
func (f *Faulty) InjectWritebackError(err error) {
	f.mu.Lock()
	f.wbErr = err
	f.wbErrs++
	f.mu.Unlock()
}

// Heal disarms every injected flush failure.
func (f *Faulty) Heal() {
	f.mu.Lock()
	f.ranges, f.failCount, f.wbErr = nil, 0, nil
	f.mu.Unlock()
}

// FlushFailures returns how many Flush/Persist calls f has failed.
func (f *Faulty) FlushFailures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// WritebackErrors counts injected write-back errors, plus the wrapped
// medium's own (see pmem.WritebackErrors).
func (f *Faulty) WritebackErrors() uint64 {
	f.mu.Lock()
	n := f.wbErrs
	f.mu.Unlock()
	if w, ok := f.Medium.(WritebackErrors); ok {
		n += w.WritebackErrors()
	}
	return n
}

// flushFault decides whether this flush fails, and with what error.
func (f *Faulty) flushFault(off, n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var err error
	if f.wbErr != nil {
		err, f.wbErr = f.wbErr, nil
	}
	for _, r := range f.ranges {
		if err == nil && n > 0 && off < r.end && r.off < off+n {
			err = r.err
		}
	}
	if f.failCount > 0 {
		if f.skip > 0 {
			f.skip--
		} else {
			f.failCount--
			if err == nil {
				err = f.countErr
			}
		}
	}
	if err != nil {
		f.failed++
		return fmt.Errorf("flush [%d, %d): %w", off, off+n, err)
	}
	return nil
}

// Flush fails as armed, else passes the flush on.
func (f *Faulty) Flush(off, n int64) error {
	if err := f.flushFault(off, n); err != nil {
		return err
	}
	return f.Medium.Flush(off, n)
}

func (f *Faulty) Fence() {
	f.Medium.Fence()
	f.mu.Lock()
	f.fences++
	var fn func()
	if f.crash != nil && f.fences >= f.crashAt {
		fn, f.crash = f.crash, nil
	}
	f.mu.Unlock()
	if fn != nil {
		fn() // outside the lock: it may panic
	}
}

// Persist goes through f.Fence so that it counts as a fence, even when its
// flush failed.
func (f *Faulty) Persist(off, n int64) error {
	err := f.Flush(off, n)
	f.Fence()
	return err
}
