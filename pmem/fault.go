package pmem

import (
	"fmt"
	"strings"
	"sync"
)

// Faulty wraps a Medium to inject faults: a crash after a chosen fence
// (wrap a Recorder to get the crash image too), failing flushes, and (with
// Inject) failing or torn operations of any kind, in the manner of
// pebble's errorfs. It changes nothing until armed.
//
// A failed operation does not reach the underlying medium, so over a
// Recorder its bytes stay undurable, as they would on media whose
// write-back failed: a failed Flush writes nothing back, a failed Fence
// orders nothing (its pending flushes ride on the next fence), a failed
// WriteAt, Fallocate or Punch changes nothing. A torn one (Injection.Torn)
// applies a prefix first.
type Faulty struct {
	Medium

	mu              sync.Mutex
	fences, crashAt int
	crash           func()

	ops      int          // operations seen (Persist counts as Flush and Fence)
	opsOf    map[Op]int   // of them, by kind
	inj      []*injection // Inject
	failures []Failure    // operations Inject failed

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

// Heal disarms every injected failure (flushes and Inject).
func (f *Faulty) Heal() {
	f.mu.Lock()
	f.ranges, f.failCount, f.wbErr, f.inj = nil, 0, nil, nil
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

// Flush fails as armed (a torn one writes back a prefix first), else
// passes the flush on.
func (f *Faulty) Flush(off, n int64) error {
	if err := f.flushFault(off, n); err != nil {
		f.count()
		return err
	}
	in, err := f.inject(OpFlush, off, n)
	if err != nil {
		if k := in.tornLen(off, n); k > 0 {
			f.Medium.Flush(off, k)
		}
		return err
	}
	return f.Medium.Flush(off, n)
}

// Fence fails as armed (ordering nothing), else passes the fence on and
// counts it for CrashAfterFences.
func (f *Faulty) Fence() error {
	if _, err := f.inject(OpFence, 0, 0); err != nil {
		return err
	}
	err := f.Medium.Fence()
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
	return err
}

// Persist goes through f.Flush and f.Fence, so that it counts as a flush
// and a fence, and fences even when its flush failed (a torn flush's
// prefix so becomes durable).
func (f *Faulty) Persist(off, n int64) error {
	err := f.Flush(off, n)
	if ferr := f.Fence(); err == nil {
		err = ferr
	}
	return err
}

// WriteAt fails as armed (a torn one stores a prefix of p first), else
// passes the write on.
func (f *Faulty) WriteAt(p []byte, off int64) error {
	in, err := f.inject(OpWrite, off, int64(len(p)))
	if err != nil {
		if k := in.tornLen(off, int64(len(p))); k > 0 {
			f.Medium.WriteAt(p[:k], off)
		}
		return err
	}
	return f.Medium.WriteAt(p, off)
}

// Fallocate fails as armed, else passes it on.
func (f *Faulty) Fallocate(off, n int64) error {
	if _, err := f.inject(OpFallocate, off, n); err != nil {
		return err
	}
	return f.Medium.Fallocate(off, n)
}

// Punch fails as armed (nothing cleared), else passes it on.
func (f *Faulty) Punch(off, n int64) error {
	if _, err := f.inject(OpPunch, off, n); err != nil {
		return err
	}
	return f.Medium.Punch(off, n)
}

// Op is a kind of medium operation, for Inject.
type Op uint8

const (
	OpWrite     Op = 1 << iota // WriteAt
	OpFallocate                // Fallocate
	OpPunch                    // Punch
	OpFlush                    // Flush, and the flush half of Persist
	OpFence                    // Fence, and the fence half of Persist

	OpAny = OpWrite | OpFallocate | OpPunch | OpFlush | OpFence
)

func (o Op) String() string {
	var names []string
	for _, x := range []struct {
		op   Op
		name string
	}{{OpWrite, "write"}, {OpFallocate, "fallocate"}, {OpPunch, "punch"}, {OpFlush, "flush"}, {OpFence, "fence"}} {
		if o&x.op != 0 {
			names = append(names, x.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// Injection says which operations Inject fails, and how.
type Injection struct {
	// Ops are the kinds that match; 0 means OpAny.
	Ops Op
	// Nth: the Nth matching operation after Inject (1 = the next one)
	// fails, and the Count-1 matching ones after it (Count 0 means 1).
	// Nth 0 fails every matching operation until Heal.
	Nth, Count int
	// Off, Len: only operations overlapping [Off, Off+Len) match (a Fence
	// has no range and never does); Len 0 matches any range.
	Off, Len int64
	// Err is what the operation returns, wrapped; nil means ErrInjected.
	Err error
	// Torn: a failing WriteAt first stores a prefix of its bytes, a
	// failing Flush (also Persist's) first writes back a prefix of its
	// range (durable at the next fence). The prefix is TornAt bytes when
	// TornAt > 0 (at most all of them), else up to the last 512-byte
	// sector boundary at or before the middle of the range.
	Torn   bool
	TornAt int64
}

// Failure is one operation Inject made fail.
type Failure struct {
	Op       Op
	Index    int   // 1-based position among all operations f has seen (Ops)
	Off, Len int64 // the operation's range (0, 0 for a Fence)
	Torn     int64 // bytes the torn operation applied first
}

type injection struct {
	Injection
	seen int
}

// SectorSize is the unit a torn operation keeps whole by default.
const SectorSize = 512

func (in *injection) tornLen(off, n int64) int64 {
	if in == nil || !in.Torn || n <= 0 {
		return 0
	}
	if in.TornAt > 0 {
		return min(in.TornAt, n)
	}
	return max((off+n/2)&^(SectorSize-1)-off, 0)
}

// Inject arms an injected failure; several may be armed at once (the
// first that matches an operation decides it). Heal disarms them all.
func (f *Faulty) Inject(in Injection) {
	if in.Ops == 0 {
		in.Ops = OpAny
	}
	if in.Count <= 0 {
		in.Count = 1
	}
	if in.Err == nil {
		in.Err = ErrInjected
	}
	f.mu.Lock()
	f.inj = append(f.inj, &injection{Injection: in})
	f.mu.Unlock()
}

// Ops returns how many operations have passed through f (failed or not):
// WriteAt, Fallocate, Punch, Flush and Fence each count one, Persist two.
// Operation k of a deterministic run can so be named and failed with
// Inject(Injection{Nth: k}) armed before the run.
func (f *Faulty) Ops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// OpsOf returns how many operations of the given kinds have passed
// through f: with it a test names the n-th write (Injection{Ops: OpWrite,
// Nth: n}) of a deterministic run.
func (f *Faulty) OpsOf(kinds Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for k, c := range f.opsOf {
		if kinds&k != 0 {
			n += c
		}
	}
	return n
}

// Failures returns the operations Inject has made fail, in order.
func (f *Faulty) Failures() []Failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Failure(nil), f.failures...)
}

// count counts a Flush that an old-style flush fault failed.
func (f *Faulty) count() {
	f.mu.Lock()
	f.countLocked(OpFlush)
	f.mu.Unlock()
}

func (f *Faulty) countLocked(op Op) {
	f.ops++
	if f.opsOf == nil {
		f.opsOf = map[Op]int{}
	}
	f.opsOf[op]++
}

// inject counts an operation and decides whether an Injection fails it;
// it returns that injection and the error to report.
func (f *Faulty) inject(op Op, off, n int64) (*injection, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.countLocked(op)
	for _, in := range f.inj {
		if in.Ops&op == 0 {
			continue
		}
		if in.Len > 0 && (op == OpFence || n <= 0 || off >= in.Off+in.Len || in.Off >= off+n) {
			continue
		}
		in.seen++
		if in.Nth > 0 && (in.seen < in.Nth || in.seen >= in.Nth+in.Count) {
			continue
		}
		fl := Failure{Op: op, Index: f.ops, Off: off, Len: n, Torn: in.tornLen(off, n)}
		f.failures = append(f.failures, fl)
		what := fmt.Sprintf("%s [%d, %d)", op, off, off+n)
		if op == OpFence {
			what = "fence"
		}
		if fl.Torn > 0 {
			return in, fmt.Errorf("%s torn after %d bytes: %w", what, fl.Torn, in.Err)
		}
		return in, fmt.Errorf("%s: %w", what, in.Err)
	}
	return nil, nil
}
