package lock

// Unit tests of the granting rule (package doc): every rule is checked on
// the queues themselves through Snapshot, step by step, plus a randomized
// stress test with an independent conflict tracker.
//
// Run with the race detector:
//
//	go test -race -count=1 ./lock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hangTimeout bounds every wait for something that must happen (a lock to
// show up in a queue, an Acquire to return). It is a deadlock detector,
// never a performance threshold: reaching it dumps every goroutine.
const hangTimeout = 20 * time.Second

const kib = 1 << 10

func xl(tid uint32, start, end uint64) *Lock {
	return &Lock{TID: tid, Start: start, End: end, Mode: Exclusive}
}

func sl(tid uint32, start, end uint64) *Lock {
	return &Lock{TID: tid, Start: start, End: end, Mode: Shared}
}

func wholeX(tid uint32) *Lock { return xl(tid, 0, Whole) }
func wholeS(tid uint32) *Lock { return sl(tid, 0, Whole) }

// tf wraps a File with helpers that start asynchronous acquisitions and
// check the queues.
type tf struct {
	t *testing.T
	f File
}

func newTF(t *testing.T) *tf { return &tf{t: t} }

// mustRun acquires l, which must run at once (Acquire with a context that
// is already cancelled: a lock that has to wait would return an error).
func (h *tf) mustRun(l *Lock) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.f.Acquire(ctx, l, nil); err != nil {
		h.t.Fatalf("lock %s should have run at once; Acquire: %v\n%s", desc(l), err, h.dump())
	}
}

// start acquires l in a new goroutine and returns the channel that gets
// Acquire's result.
func (h *tf) start(l *Lock) <-chan error {
	return h.startCtx(context.Background(), l, nil)
}

func (h *tf) startCtx(ctx context.Context, l *Lock, giveUp func() bool) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- h.f.Acquire(ctx, l, giveUp) }()
	return ch
}

// startWaiting starts l and returns once l is on the wait queue.
func (h *tf) startWaiting(l *Lock) <-chan error {
	h.t.Helper()
	ch := h.start(l)
	h.waitQueued(l.TID)
	return ch
}

func (h *tf) startWaitingCtx(ctx context.Context, l *Lock, giveUp func() bool) <-chan error {
	h.t.Helper()
	ch := h.startCtx(ctx, l, giveUp)
	h.waitQueued(l.TID)
	return ch
}

// waitQueued waits until the lock of thread tid is on the wait queue.
func (h *tf) waitQueued(tid uint32) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("lock %d on the wait queue", tid), func(_, wait []LockInfo, _ Stats) bool {
		return slices.Contains(tids(wait), tid)
	})
}

func (h *tf) waitFor(what string, cond func(run, wait []LockInfo, st Stats) bool) {
	h.t.Helper()
	deadline := time.Now().Add(hangTimeout)
	for {
		run, wait, st := h.f.Snapshot()
		if cond(run, wait, st) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("waited %v for %s\n%s\n%s", hangTimeout, what, h.dump(), goroutines())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// expect checks the queues: the run queue as a set of thread ids, the
// wait queue in order.
func (h *tf) expect(step string, run, wait []uint32) {
	h.t.Helper()
	r, w, _ := h.f.Snapshot()
	if err := checkQueues(r, w); err != nil {
		h.t.Fatalf("%s: %v\n%s", step, err, h.dump())
	}
	gotRun := tids(r)
	slices.Sort(gotRun)
	run = slices.Clone(run)
	slices.Sort(run)
	if !slices.Equal(gotRun, run) || !slices.Equal(tids(w), wait) {
		h.t.Fatalf("%s: queues: run %v wait %v, want run %v wait %v\n%s", step, gotRun, tids(w), run, wait, h.dump())
	}
}

func (h *tf) stats() Stats {
	_, _, st := h.f.Snapshot()
	return st
}

func (h *tf) dump() string { return fdump(&h.f) }

func tids(ls []LockInfo) []uint32 {
	out := []uint32{}
	for _, l := range ls {
		out = append(out, l.TID)
	}
	return out
}

func desc(l *Lock) string {
	return infoDesc(LockInfo{TID: l.TID, Start: l.Start, End: l.End, Mode: l.Mode})
}

func infoDesc(l LockInfo) string {
	r := fmt.Sprintf("[%d,%d)", l.Start, l.End)
	if l.Start == 0 && l.End == Whole {
		r = "whole"
	}
	return fmt.Sprintf("tid %d %s %s", l.TID, l.Mode, r)
}

func goroutines() string {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return "goroutines:\n" + b.String()
}

// done expects Acquire's result on ch (without a hang).
func (h *tf) done(ch <-chan error, what string) error {
	h.t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(hangTimeout):
		h.t.Fatalf("%s: Acquire did not return within %v\n%s\n%s", what, hangTimeout, h.dump(), goroutines())
		return nil
	}
}

func (h *tf) granted(ch <-chan error, what string) {
	h.t.Helper()
	if err := h.done(ch, what); err != nil {
		h.t.Fatalf("%s: Acquire: %v, want the lock\n%s", what, err, h.dump())
	}
}

// notReturned checks that Acquire has not returned yet.
func (h *tf) notReturned(ch <-chan error, what string) {
	h.t.Helper()
	select {
	case err := <-ch:
		h.t.Fatalf("%s: Acquire returned (%v) but should still wait\n%s", what, err, h.dump())
	default:
	}
}

// ---------------------------------------------------------------------------
// Conflicts

func TestConflictMatrix(t *testing.T) {
	type rng struct{ s, e uint64 }
	cases := []struct {
		name     string
		a, b     rng
		overlaps bool
	}{
		{"identical", rng{0, 4 * kib}, rng{0, 4 * kib}, true},
		{"adjacent", rng{0, 4 * kib}, rng{4 * kib, 8 * kib}, false},
		{"adjacent-reversed", rng{4 * kib, 8 * kib}, rng{0, 4 * kib}, false},
		{"one byte overlap", rng{0, 4*kib + 1}, rng{4 * kib, 8 * kib}, true},
		{"contained", rng{0, 64 * kib}, rng{8 * kib, 12 * kib}, true},
		{"containing", rng{8 * kib, 12 * kib}, rng{0, 64 * kib}, true},
		{"far apart", rng{0, 4 * kib}, rng{1 << 30, 1<<30 + 4*kib}, false},
		{"whole vs range", rng{0, Whole}, rng{1 << 40, 1<<40 + 1}, true},
		{"whole vs whole", rng{0, Whole}, rng{0, Whole}, true},
		{"range at the top vs whole", rng{Whole - 4*kib, Whole}, rng{0, Whole}, true},
	}
	modes := []Mode{Shared, Exclusive}
	for _, c := range cases {
		for _, ma := range modes {
			for _, mb := range modes {
				name := fmt.Sprintf("%s/%s-%s", c.name, ma, mb)
				t.Run(name, func(t *testing.T) {
					want := c.overlaps && (ma == Exclusive || mb == Exclusive)
					a := &Lock{TID: 1, Start: c.a.s, End: c.a.e, Mode: ma}
					b := &Lock{TID: 2, Start: c.b.s, End: c.b.e, Mode: mb}
					if got := a.conflicts(b); got != want {
						t.Errorf("conflicts(a, b) = %v, want %v", got, want)
					}
					if got := b.conflicts(a); got != want {
						t.Errorf("conflicts(b, a) = %v, want %v (not symmetric)", got, want)
					}
					// The same through the queues: b runs beside a iff no conflict.
					h := newTF(t)
					h.mustRun(a)
					if got := h.f.TryAcquire(b); got == want {
						t.Fatalf("TryAcquire(b) with a running = %v, want %v\n%s", got, !want, h.dump())
					}
					if want {
						ch := h.startWaiting(b)
						h.expect("b waits for a", []uint32{1}, []uint32{2})
						h.f.Release(a)
						h.expect("a released", []uint32{2}, nil)
						h.granted(ch, "b after a's release")
						h.f.Release(b)
					} else {
						h.expect("both run", []uint32{1, 2}, nil)
						h.f.Release(b)
						h.f.Release(a)
					}
					if h.f.Busy() {
						t.Fatalf("busy after releasing everything\n%s", h.dump())
					}
				})
			}
		}
	}
}

func TestDisjointExclusiveRunTogether(t *testing.T) {
	h := newTF(t)
	const n = 16
	var ls []*Lock
	for i := range uint64(n) {
		l := xl(uint32(i+1), i*64*kib, (i+1)*64*kib)
		h.mustRun(l) // none waits
		ls = append(ls, l)
	}
	var all []uint32
	for i := range uint32(n) {
		all = append(all, i+1)
	}
	h.expect("16 disjoint writers", all, nil)
	st := h.stats()
	if st.MaxExclusive != n || st.MaxRunning != n || st.Waits != 0 || st.Acquired != n {
		t.Fatalf("stats %+v: want MaxExclusive=MaxRunning=Acquired=%d, Waits=0", st, n)
	}
	for _, l := range ls {
		h.f.Release(l)
	}
	h.expect("all released", nil, nil)
}

func TestOverlappingExclusiveWait(t *testing.T) {
	h := newTF(t)
	a := xl(1, 0, 8*kib)
	h.mustRun(a)
	b := xl(2, 4*kib, 12*kib) // overlaps a
	c := xl(3, 8*kib, 16*kib) // overlaps b (waiting ahead), not a
	d := xl(4, 16*kib, 20*kib)
	chB := h.startWaiting(b)
	chC := h.startWaiting(c)
	h.mustRun(d) // disjoint from everything: never waits
	h.expect("b waits for a, c for b", []uint32{1, 4}, []uint32{2, 3})
	h.notReturned(chB, "b")
	h.notReturned(chC, "c")
	h.f.Release(a)
	h.expect("a released: b runs, c waits for b", []uint32{2, 4}, []uint32{3})
	h.granted(chB, "b")
	h.notReturned(chC, "c")
	h.f.Release(b)
	h.expect("b released: c runs", []uint32{3, 4}, nil)
	h.granted(chC, "c")
	h.f.Release(c)
	h.f.Release(d)
	h.expect("empty", nil, nil)
	if st := h.stats(); st.Waits != 2 || st.Acquired != 4 || st.Interrupted != 0 {
		t.Fatalf("stats %+v: want Waits=2 Acquired=4 Interrupted=0", st)
	}
}

func TestSharedNeverConflict(t *testing.T) {
	h := newTF(t)
	ls := []*Lock{
		sl(1, 0, 8*kib),
		sl(2, 0, 8*kib),
		wholeS(3),
		sl(4, 4*kib, 1<<20),
		wholeS(5),
	}
	for _, l := range ls {
		h.mustRun(l)
	}
	h.expect("readers", []uint32{1, 2, 3, 4, 5}, nil)
	if st := h.stats(); st.MaxRunning != 5 || st.MaxExclusive != 0 || st.Waits != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A writer far from every range reader still overlaps the whole-file
	// readers: it waits for them (and only them).
	w := xl(6, 1<<30, 1<<30+4*kib)
	chW := h.startWaiting(w)
	// A reader arriving now overlaps the waiting writer's range (whole
	// file): FIFO puts it behind the writer.
	r := wholeS(7)
	chR := h.startWaiting(r)
	// A reader of a range the writer does not touch runs at once.
	h.mustRun(sl(8, 0, 4*kib))
	h.expect("writer waits for whole-file readers", []uint32{1, 2, 3, 4, 5, 8}, []uint32{6, 7})
	for _, l := range ls {
		if l.IsWhole() {
			h.f.Release(l)
		}
	}
	h.expect("whole-file readers gone: writer runs; the whole-file reader behind it waits", []uint32{1, 2, 4, 6, 8}, []uint32{7})
	h.granted(chW, "writer")
	h.notReturned(chR, "reader behind the writer")
	h.f.Release(w)
	h.expect("writer released", []uint32{1, 2, 4, 7, 8}, nil)
	h.granted(chR, "reader")
}

// ---------------------------------------------------------------------------
// Whole-file locks

// A whole-file exclusive lock waits until the run queue is empty, and
// runs only when nothing conflicting waits ahead of it.
func TestWholeFileWaitsForEmptyQueues(t *testing.T) {
	h := newTF(t)
	a := xl(1, 0, 4*kib)
	b := sl(2, 1<<20, 1<<20+4*kib)
	h.mustRun(a)
	h.mustRun(b)
	c := xl(3, 0, 4*kib) // waits for a
	chC := h.startWaiting(c)
	w := wholeX(4)
	chW := h.startWaiting(w)
	h.expect("W waits behind c", []uint32{1, 2}, []uint32{3, 4})
	if h.f.TryAcquire(wholeX(99)) {
		t.Fatal("TryAcquire of a whole-file lock succeeded on a busy file")
	}
	h.f.Release(b)
	h.expect("b released: W still waits (a runs, c waits ahead)", []uint32{1}, []uint32{3, 4})
	h.notReturned(chW, "W")
	h.f.Release(a)
	h.expect("a released: c (ahead of W) runs, W waits for it", []uint32{3}, []uint32{4})
	h.granted(chC, "c")
	h.notReturned(chW, "W")
	h.f.Release(c)
	h.expect("run queue empty: W runs", []uint32{4}, nil)
	h.granted(chW, "W")
	h.f.Release(w)
	h.expect("empty", nil, nil)
	// Exactly c was granted while W waited.
	if st := h.stats(); st.MaxBypass != 1 {
		t.Fatalf("MaxBypass = %d, want 1 (c, queued ahead of W)", st.MaxBypass)
	}
}

// A whole-file lock on an idle file runs at once; on a file whose queues
// hold only locks it does not conflict with (a shared whole-file lock among
// readers) it runs too.
func TestWholeFileOnIdleFile(t *testing.T) {
	h := newTF(t)
	w := wholeX(1)
	h.mustRun(w)
	h.f.Release(w)
	h.mustRun(sl(2, 0, 4*kib))
	h.mustRun(wholeS(3))
	h.expect("readers", []uint32{2, 3}, nil)
}

// Range locks arriving while a whole-file lock runs go to the wait queue
// and move to the run queue, in order, when it is released.
func TestRangeLocksWaitWhileWholeFileRuns(t *testing.T) {
	h := newTF(t)
	w := wholeX(1)
	h.mustRun(w)
	r2 := xl(2, 0, 4*kib)
	r3 := sl(3, 1<<20, 1<<20+4*kib)
	r4 := xl(4, 0, 4*kib) // conflicts with r2 too
	r5 := sl(5, 1<<20, 1<<20+8*kib)
	r6 := xl(6, 8*kib, 12*kib)
	var chs []<-chan error
	for _, l := range []*Lock{r2, r3, r4, r5, r6} {
		chs = append(chs, h.startWaiting(l))
		if h.f.TryAcquire(xl(99, 1<<40, 1<<40+1)) {
			t.Fatal("TryAcquire of a range lock succeeded while a whole-file lock runs")
		}
	}
	h.expect("all range locks wait for W", []uint32{1}, []uint32{2, 3, 4, 5, 6})
	for i, ch := range chs {
		h.notReturned(ch, fmt.Sprintf("r%d", i+2))
	}
	h.f.Release(w)
	h.expect("W released: the waiters move to the run queue, r4 waits for r2", []uint32{2, 3, 5, 6}, []uint32{4})
	for i, ch := range chs {
		if i == 2 {
			h.notReturned(ch, "r4")
			continue
		}
		h.granted(ch, fmt.Sprintf("r%d", i+2))
	}
	h.f.Release(r2)
	h.expect("r2 released: r4 runs", []uint32{3, 4, 5, 6}, nil)
	h.granted(chs[2], "r4")
	// Locks that waited carry the time they started waiting.
	run, _, _ := h.f.Snapshot()
	for _, l := range run {
		if l.Since.IsZero() {
			t.Errorf("lock %s waited but has no Since", infoDesc(l))
		}
	}
}

// Range locks arriving while a whole-file lock *waits* queue behind it,
// even when they conflict with nothing running (FIFO), and run after it.
func TestRangeLocksQueueBehindWaitingWholeFile(t *testing.T) {
	h := newTF(t)
	a := xl(1, 0, 4*kib)
	h.mustRun(a)
	w := wholeX(2)
	chW := h.startWaiting(w)
	// Disjoint from a: would run if W were not waiting.
	r := xl(3, 1<<20, 1<<20+4*kib)
	s := sl(4, 1<<21, 1<<21+4*kib)
	chR := h.startWaiting(r)
	chS := h.startWaiting(s)
	h.expect("r and s queue behind W", []uint32{1}, []uint32{2, 3, 4})
	run, wait, _ := h.f.Snapshot()
	if !run[0].Since.IsZero() {
		t.Errorf("a never waited but has Since %v", run[0].Since)
	}
	for _, l := range wait {
		if l.Since.IsZero() {
			t.Errorf("waiting lock %s has no Since", infoDesc(l))
		}
	}
	h.f.Release(a)
	h.expect("a released: W runs, r and s still wait", []uint32{2}, []uint32{3, 4})
	h.granted(chW, "W")
	h.notReturned(chR, "r")
	h.notReturned(chS, "s")
	h.f.Release(w)
	h.expect("W released: r and s run", []uint32{3, 4}, nil)
	h.granted(chR, "r")
	h.granted(chS, "s")
	if st := h.stats(); st.MaxBypass != 0 {
		t.Fatalf("MaxBypass = %d, want 0: nothing was queued ahead of W", st.MaxBypass)
	}
}

// Two whole-file locks: the second waits for the first, and range locks
// behind both wait for both.
func TestWholeFileAfterWholeFile(t *testing.T) {
	h := newTF(t)
	w1 := wholeX(1)
	h.mustRun(w1)
	w2 := wholeX(2)
	ch2 := h.startWaiting(w2)
	r := sl(3, 0, 4*kib)
	chR := h.startWaiting(r)
	w3 := wholeS(4) // shared whole-file: conflicts with w2 (exclusive, ahead)
	ch3 := h.startWaiting(w3)
	h.expect("queued", []uint32{1}, []uint32{2, 3, 4})
	h.f.Release(w1)
	h.expect("w1 released", []uint32{2}, []uint32{3, 4})
	h.granted(ch2, "w2")
	h.f.Release(w2)
	h.expect("w2 released: the reader and the shared whole-file lock run together", []uint32{3, 4}, nil)
	h.granted(chR, "r")
	h.granted(ch3, "w3")
}

// MaxBypass counts exactly the grants made while a whole-file lock waited:
// the locks queued ahead of it (FIFO lets nothing else pass).
func TestMaxBypassCountsQueueAhead(t *testing.T) {
	h := newTF(t)
	a := xl(1, 0, 4*kib)
	h.mustRun(a)
	const ahead = 5
	var readers []*Lock
	var chs []<-chan error
	for i := range uint32(ahead) {
		r := sl(10+i, 0, 4*kib) // waits for a; readers do not conflict with each other
		readers = append(readers, r)
		chs = append(chs, h.startWaiting(r))
	}
	w := wholeX(2)
	chW := h.startWaiting(w)
	// A stream of later range locks, disjoint from a and the readers: all
	// must queue behind W.
	var later []<-chan error
	for i := range uint32(20) {
		l := xl(100+i, uint64(1+i)<<20, uint64(1+i)<<20+4*kib)
		later = append(later, h.startWaiting(l))
	}
	h.f.Release(a)
	for i, ch := range chs {
		h.granted(ch, fmt.Sprintf("reader %d", i))
	}
	_, wait, _ := h.f.Snapshot()
	if len(wait) != 21 || wait[0].TID != 2 {
		t.Fatalf("W should head the wait queue with the 20 later locks behind it\n%s", h.dump())
	}
	for _, r := range readers {
		h.f.Release(r)
	}
	h.granted(chW, "W")
	if st := h.stats(); st.MaxBypass != ahead {
		t.Fatalf("MaxBypass = %d, want %d (the readers queued ahead of W)", st.MaxBypass, ahead)
	}
	h.f.Release(w)
	for i, ch := range later {
		h.granted(ch, fmt.Sprintf("later lock %d", i))
	}
}

// FIFO bounds MaxBypass by the queue ahead of the whole-file lock. For a
// shared whole-file lock that waits (behind a writer), readers of other
// ranges conflict with nothing and legitimately run; they must not count.
func TestMaxBypassSharedWholeFile(t *testing.T) {
	h := newTF(t)
	a := xl(1, 0, 4*kib)
	h.mustRun(a)
	r := wholeS(2)
	chR := h.startWaiting(r)
	for i := range uint32(10) {
		l := sl(10+i, 1<<20, 1<<20+4*kib) // conflicts with neither a nor r: runs
		h.mustRun(l)
		h.f.Release(l)
	}
	h.f.Release(a)
	h.granted(chR, "shared whole-file lock")
	if st := h.stats(); st.MaxBypass != 0 {
		t.Fatalf("MaxBypass = %d, want 0: nothing was queued ahead of the whole-file lock and nothing that conflicts with it passed it", st.MaxBypass)
	}
}

// ---------------------------------------------------------------------------
// Fairness under streams

// A stream of range locks from many goroutines never starves whole-file
// locks, and every whole-file lock is passed by at most the locks that
// were queued ahead of it: one per range-locking goroutine.
func TestRangeStreamDoesNotStarveWholeFile(t *testing.T) {
	h := newTF(t)
	const streams = 8
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rangeGrants atomic.Int64
	for g := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(g), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Ranges overlap each other often: the waiters form chains.
				start := uint64(rnd.IntN(16)) * 4 * kib
				l := &Lock{TID: uint32(100 + g), Start: start, End: start + uint64(1+rnd.IntN(4))*4*kib, Mode: Mode(rnd.IntN(2))}
				if err := h.f.Acquire(context.Background(), l, nil); err != nil {
					t.Error(err)
					return
				}
				rangeGrants.Add(1)
				if rnd.IntN(4) == 0 {
					time.Sleep(time.Duration(rnd.IntN(50)) * time.Microsecond)
				}
				h.f.Release(l)
			}
		}()
	}
	// Let the streams get going before each whole-file lock.
	finished := make(chan struct{})
	const wholes = 200
	go func() {
		defer close(finished)
		for i := range wholes {
			for n := rangeGrants.Load(); rangeGrants.Load() < n+5; {
				time.Sleep(10 * time.Microsecond)
			}
			w := wholeX(uint32(1 + i%2))
			if err := h.f.Acquire(context.Background(), w, nil); err != nil {
				t.Error(err)
				return
			}
			h.f.Release(w)
		}
	}()
	select {
	case <-finished:
	case <-time.After(hangTimeout):
		close(stop)
		t.Fatalf("whole-file locks starved: not all %d acquired within %v\n%s\n%s", wholes, hangTimeout, h.dump(), goroutines())
	}
	close(stop)
	wg.Wait()
	st := h.stats()
	t.Logf("range grants %d, stats %+v", rangeGrants.Load(), st)
	if st.MaxBypass > streams {
		t.Fatalf("MaxBypass = %d > %d: a whole-file lock was passed by more locks than were queued ahead of it", st.MaxBypass, streams)
	}
	if st.Waits == 0 {
		t.Fatal("no lock ever waited: the test proves nothing")
	}
	if h.f.Busy() {
		t.Fatalf("busy at the end\n%s", h.dump())
	}
}

// A stream of whole-file locks never starves a range lock.
func TestWholeFileStreamDoesNotStarveRange(t *testing.T) {
	h := newTF(t)
	// Deterministic first: W1 runs, r waits, W2 arrives behind r.
	w1 := wholeX(1)
	h.mustRun(w1)
	r := xl(2, 4*kib, 8*kib)
	chR := h.startWaiting(r)
	w2 := wholeX(3)
	ch2 := h.startWaiting(w2)
	h.expect("r before W2", []uint32{1}, []uint32{2, 3})
	h.f.Release(w1)
	h.expect("W1 released: r runs, W2 waits for it", []uint32{2}, []uint32{3})
	h.granted(chR, "r")
	h.f.Release(r)
	h.granted(ch2, "W2")
	h.f.Release(w2)

	// Then under load: 4 goroutines take whole-file locks back to back.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var wholeGrants atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				w := &Lock{TID: uint32(10 + g), Start: 0, End: Whole, Mode: Mode(g % 2)}
				if err := h.f.Acquire(context.Background(), w, nil); err != nil {
					t.Error(err)
					return
				}
				wholeGrants.Add(1)
				h.f.Release(w)
			}
		}()
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := range 300 {
			for n := wholeGrants.Load(); wholeGrants.Load() < n+3; {
				time.Sleep(10 * time.Microsecond)
			}
			l := xl(uint32(100+i%3), uint64(i)*4*kib, uint64(i+1)*4*kib)
			if err := h.f.Acquire(context.Background(), l, nil); err != nil {
				t.Error(err)
				return
			}
			h.f.Release(l)
		}
	}()
	select {
	case <-finished:
	case <-time.After(hangTimeout):
		close(stop)
		t.Fatalf("range lock starved by whole-file locks\n%s\n%s", h.dump(), goroutines())
	}
	close(stop)
	wg.Wait()
	if st := h.stats(); st.MaxBypass > 5 { // 4 whole-file goroutines + the range locker
		t.Fatalf("MaxBypass = %d > 5", st.MaxBypass)
	}
}

// ---------------------------------------------------------------------------
// Cancellation

// An abandoned wait leaves the queue, and the locks behind it that waited
// only for it run at once (no lost wake-up).
func TestCancelWakesLocksBehind(t *testing.T) {
	for _, giveUpNil := range []bool{false, true} {
		t.Run(fmt.Sprintf("giveUpNil=%v", giveUpNil), func(t *testing.T) {
			h := newTF(t)
			a := xl(1, 0, 4*kib)
			h.mustRun(a)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var giveUp func() bool
			var calls atomic.Int32
			if !giveUpNil {
				giveUp = func() bool { calls.Add(1); return true }
			}
			w := wholeX(2)
			chW := h.startWaitingCtx(ctx, w, giveUp)
			r := xl(3, 1<<20, 1<<20+4*kib) // waits only for W
			chR := h.startWaiting(r)
			s := sl(4, 0, 4*kib) // waits for W and for a
			chS := h.startWaiting(s)
			v := sl(5, 1<<21, 1<<21+4*kib) // waits only for W
			chV := h.startWaiting(v)
			h.expect("queued behind W", []uint32{1}, []uint32{2, 3, 4, 5})
			cancel()
			if err := h.done(chW, "W"); !errors.Is(err, context.Canceled) {
				t.Fatalf("W's Acquire = %v, want context.Canceled", err)
			}
			if !giveUpNil && calls.Load() != 1 {
				t.Fatalf("giveUp called %d times, want 1", calls.Load())
			}
			h.expect("W gone: r and v run, s still waits for a", []uint32{1, 3, 5}, []uint32{4})
			h.granted(chR, "r")
			h.granted(chV, "v")
			h.notReturned(chS, "s")
			h.f.Release(a)
			h.granted(chS, "s")
			h.f.Release(r)
			h.f.Release(s)
			h.f.Release(v)
			h.expect("empty", nil, nil)
			st := h.stats()
			if st.Interrupted != 1 || st.Waits != 4 || st.Acquired != 4 {
				t.Fatalf("stats %+v: want Interrupted=1 Waits=4 Acquired=4", st)
			}
			// The file is usable: a whole-file lock runs at once.
			h.mustRun(wholeX(6))
		})
	}
}

// A cancelled range lock in the middle of the queue: the lock behind it
// that conflicted only with it runs.
func TestCancelMiddleOfQueue(t *testing.T) {
	h := newTF(t)
	a := xl(1, 0, 4*kib)
	h.mustRun(a)
	ctx, cancel := context.WithCancel(context.Background())
	b := xl(2, 0, 8*kib) // waits for a
	chB := h.startWaitingCtx(ctx, b, nil)
	c := xl(3, 4*kib, 8*kib) // waits for b only
	chC := h.startWaiting(c)
	d := xl(4, 0, 4*kib) // waits for a and b
	chD := h.startWaiting(d)
	h.expect("queued", []uint32{1}, []uint32{2, 3, 4})
	cancel()
	if err := h.done(chB, "b"); !errors.Is(err, context.Canceled) {
		t.Fatalf("b: %v, want context.Canceled", err)
	}
	h.expect("b gone: c runs, d waits for a", []uint32{1, 3}, []uint32{4})
	h.granted(chC, "c")
	h.notReturned(chD, "d")
	h.f.Release(a)
	h.granted(chD, "d")
}

// giveUp returning false keeps waiting; the lock is granted later.
func TestGiveUpFalseKeepsWaiting(t *testing.T) {
	h := newTF(t)
	a := xl(1, 0, 4*kib)
	h.mustRun(a)
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int32
	w := wholeX(2)
	chW := h.startWaitingCtx(ctx, w, func() bool { calls.Add(1); return false })
	r := xl(3, 1<<20, 1<<20+4*kib)
	chR := h.startWaiting(r)
	cancel()
	deadline := time.Now().Add(hangTimeout)
	for calls.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("giveUp never called after the context ended\n%s", goroutines())
		}
		time.Sleep(50 * time.Microsecond)
	}
	h.expect("W still waits after refusing to give up", []uint32{1}, []uint32{2, 3})
	h.notReturned(chW, "W")
	h.f.Release(a)
	h.granted(chW, "W")
	h.expect("W runs", []uint32{2}, []uint32{3})
	h.f.Release(w)
	h.granted(chR, "r")
	if st := h.stats(); st.Interrupted != 0 {
		t.Fatalf("Interrupted = %d, want 0", st.Interrupted)
	}
	if calls.Load() != 1 {
		t.Fatalf("giveUp called %d times, want 1", calls.Load())
	}
}

// A lock that can run is granted even with a context that has ended.
func TestAcquireEndedContextFreeLock(t *testing.T) {
	h := newTF(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.f.Acquire(ctx, xl(1, 0, 4*kib), func() bool { t.Error("giveUp called"); return true }); err != nil {
		t.Fatalf("Acquire on a free range with an ended context: %v", err)
	}
	// nil context: allowed, never ends.
	l := xl(2, 8*kib, 12*kib)
	if err := h.f.Acquire(context.TODO(), l, nil); err != nil {
		t.Fatal(err)
	}
}

// A deadline that expires while waiting: DeadlineExceeded, queue clean.
func TestAcquireDeadline(t *testing.T) {
	h := newTF(t)
	a := xl(1, 0, 4*kib)
	h.mustRun(a)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	err := h.f.Acquire(ctx, xl(2, 0, 4*kib), nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v, want DeadlineExceeded", err)
	}
	h.expect("waiter gone", []uint32{1}, nil)
	h.f.Release(a)
	h.expect("empty", nil, nil)
	if h.f.Busy() {
		t.Fatal("busy")
	}
}

// Cancellation racing with the grant: whatever Acquire returns, the lock is
// held iff it returned nil, and the queues and counters stay consistent.
func TestCancelRacesGrant(t *testing.T) {
	h := newTF(t)
	var held, gaveUp int
	for i := range 2000 {
		a := xl(1, 0, 4*kib)
		h.mustRun(a)
		ctx, cancel := context.WithCancel(context.Background())
		w := wholeX(2)
		chW := h.startWaitingCtx(ctx, w, func() bool { return true })
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); h.f.Release(a) }()
		go func() { defer wg.Done(); cancel() }()
		wg.Wait()
		err := h.done(chW, "W")
		if err == nil {
			held++
			h.expect(fmt.Sprintf("iteration %d: W got the lock", i), []uint32{2}, nil)
			h.f.Release(w)
		} else {
			gaveUp++
		}
		h.expect(fmt.Sprintf("iteration %d: empty", i), nil, nil)
		// A whole-file exclusive lock must run now: no ghost lock counted.
		l := wholeX(3)
		if !h.f.TryAcquire(l) {
			t.Fatalf("iteration %d: whole-file lock refused on an idle file\n%s", i, h.dump())
		}
		h.f.Release(l)
	}
	st := h.stats()
	t.Logf("held %d, gave up %d, stats %+v", held, gaveUp, st)
	if st.Interrupted > uint64(gaveUp) {
		t.Fatalf("Interrupted = %d > %d abandoned waits", st.Interrupted, gaveUp)
	}
	if st.MaxExclusive != 1 || st.MaxRunning != 1 {
		t.Fatalf("stats %+v: MaxRunning and MaxExclusive must stay 1", st)
	}
}

// ---------------------------------------------------------------------------
// TryAcquire

func TestTryAcquire(t *testing.T) {
	h := newTF(t)
	a := xl(1, 0, 8*kib)
	if !h.f.TryAcquire(a) {
		t.Fatal("TryAcquire on an idle file failed")
	}
	if h.f.TryAcquire(xl(2, 4*kib, 12*kib)) {
		t.Fatal("TryAcquire of an overlapping write succeeded")
	}
	if h.f.TryAcquire(sl(2, 0, 4*kib)) {
		t.Fatal("TryAcquire of an overlapping read succeeded")
	}
	b := xl(3, 8*kib, 12*kib)
	if !h.f.TryAcquire(b) {
		t.Fatal("TryAcquire of an adjacent write failed")
	}
	// A waiter conflicting with the candidate blocks it even though nothing
	// running does.
	w := wholeX(4)
	chW := h.startWaiting(w)
	if h.f.TryAcquire(xl(5, 1<<20, 1<<20+4*kib)) {
		t.Fatal("TryAcquire passed a waiting whole-file lock")
	}
	before := h.stats()
	h.expect("failed TryAcquires leave no trace", []uint32{1, 3}, []uint32{4})
	if before.Waits != 1 || before.Acquired != 2 {
		t.Fatalf("stats %+v: want Waits=1 (W), Acquired=2", before)
	}
	h.f.Release(a)
	h.f.Release(b)
	h.granted(chW, "W")
	h.f.Release(w)
	if !h.f.TryAcquire(xl(6, 0, 4*kib)) {
		t.Fatal("TryAcquire after everything was released failed")
	}
}

// ---------------------------------------------------------------------------
// Stress

// tracker is an independent record of the locks held, checked on every
// grant: no two conflicting locks may be held at once.
type tracker struct {
	mu   sync.Mutex
	held map[*Lock]int // lock -> goroutine
}

func overlapConflict(a, b *Lock) bool {
	if a.Mode == Shared && b.Mode == Shared {
		return false
	}
	return a.Start < b.End && b.Start < a.End
}

func (tr *tracker) add(l *Lock, g int) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for o, og := range tr.held {
		if overlapConflict(l, o) {
			return fmt.Errorf("goroutine %d holds %s while goroutine %d holds %s", g, desc(l), og, desc(o))
		}
	}
	tr.held[l] = g
	return nil
}

func (tr *tracker) remove(l *Lock) {
	tr.mu.Lock()
	delete(tr.held, l)
	tr.mu.Unlock()
}

// checkQueues recomputes the granting rule on a snapshot, independently of
// the implementation. Between two operations (Snapshot holds the file's
// mutex) the queues must be settled: no two running locks conflict, and no
// waiter could run (every operation that can unblock a waiter grants it
// before returning), so a waiter that could run is a lost wake-up.
func checkQueues(run, wait []LockInfo) error {
	infoConflict := func(a, b LockInfo) bool {
		if a.Mode == Shared && b.Mode == Shared {
			return false
		}
		return a.Start < b.End && b.Start < a.End
	}
	for i := range run {
		for j := i + 1; j < len(run); j++ {
			if infoConflict(run[i], run[j]) {
				return fmt.Errorf("conflicting locks run together: %s and %s", infoDesc(run[i]), infoDesc(run[j]))
			}
		}
	}
	for i, w := range wait {
		blocked := false
		for _, r := range run {
			blocked = blocked || infoConflict(w, r)
		}
		for _, a := range wait[:i] {
			blocked = blocked || infoConflict(w, a)
		}
		if !blocked {
			return fmt.Errorf("lost wake-up: waiter %s conflicts with nothing running or waiting ahead of it", infoDesc(w))
		}
	}
	return nil
}

// TestStress: 16 goroutines take random range and whole-file locks, shared
// and exclusive, some with timeouts that give up and some with timeouts
// that keep waiting. An independent tracker checks that no two conflicting
// locks are ever held at once; a watchdog fails with a goroutine dump if
// the whole thing does not finish (deadlock, lost wake-up).
//
// "exclusive-whole" takes only exclusive whole-file locks, so that every
// lock arriving after a waiting whole-file lock conflicts with it and
// MaxBypass is bounded by the other goroutines (one lock each can be
// queued ahead). "mixed" also takes shared whole-file locks, which
// non-conflicting readers may legitimately pass.
func TestStress(t *testing.T) {
	t.Run("mixed", func(t *testing.T) { stress(t, true) })
	t.Run("exclusive-whole", func(t *testing.T) { stress(t, false) })
}

func stress(t *testing.T, sharedWhole bool) {
	const (
		nGoroutines = 16
		fileSize    = 1 << 20
	)
	iters := 2000
	if testing.Short() {
		iters = 300
	}
	var f File
	tr := &tracker{held: map[*Lock]int{}}
	var acquired, abandoned, keptWaiting atomic.Uint64
	errc := make(chan error, nGoroutines+1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range nGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(g)*7919, uint64(time.Now().UnixNano())))
			for range iters {
				l := &Lock{TID: uint32(g + 1), Mode: Mode(rnd.IntN(2))}
				switch rnd.IntN(20) {
				case 0, 1:
					l.Start, l.End = 0, Whole
					if !sharedWhole {
						l.Mode = Exclusive
					}
				default:
					l.Start = uint64(rnd.IntN(fileSize))
					l.End = l.Start + 1 + uint64(rnd.IntN(64*kib))
				}
				ctx := context.Background()
				var cancel context.CancelFunc = func() {}
				var giveUp func() bool
				switch rnd.IntN(4) {
				case 0: // a timeout, giving up
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rnd.IntN(200))*time.Microsecond)
					giveUp = func() bool { return true }
				case 1: // a timeout that does not give up
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rnd.IntN(200))*time.Microsecond)
					giveUp = func() bool { keptWaiting.Add(1); return false }
				}
				err := f.Acquire(ctx, l, giveUp)
				cancel()
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						errc <- fmt.Errorf("goroutine %d: Acquire: %v", g, err)
						return
					}
					abandoned.Add(1)
					continue
				}
				acquired.Add(1)
				if err := tr.add(l, g); err != nil {
					errc <- err
					return
				}
				// Hold it a little: make overlaps visible to the tracker.
				for range rnd.IntN(3) {
					runtime.Gosched()
				}
				if rnd.IntN(8) == 0 {
					time.Sleep(time.Duration(rnd.IntN(30)) * time.Microsecond)
				}
				tr.remove(l)
				f.Release(l)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	// The checker: the queues are settled at every snapshot.
	checked := make(chan int, 1)
	go func() {
		n := 0
		defer func() { checked <- n }()
		for {
			select {
			case <-done:
				return
			default:
			}
			run, wait, _ := f.Snapshot()
			if err := checkQueues(run, wait); err != nil {
				errc <- fmt.Errorf("snapshot %d: %v\n%s", n, err, fdump(&f))
				return
			}
			n++
			runtime.Gosched()
		}
	}()
	// The watchdog: fail when no Acquire returned for hangTimeout (a
	// deadlock or a lost wake-up), however long the whole run takes on a
	// loaded machine.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last, lastChange := uint64(0), time.Now()
wait:
	for {
		select {
		case <-done:
			break wait
		case err := <-errc:
			t.Fatalf("%v\n%s", err, fdump(&f))
		case <-tick.C:
			if p := acquired.Load() + abandoned.Load(); p != last {
				last, lastChange = p, time.Now()
			} else if time.Since(lastChange) > hangTimeout {
				t.Fatalf("stress test stuck: no Acquire returned for %v (deadlock or lost wake-up)\n%s\n%s", hangTimeout, fdump(&f), goroutines())
			}
		}
	}
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	nChecks := <-checked
	run, wait, st := f.Snapshot()
	t.Logf("%d snapshots checked; acquired %d, abandoned %d, kept waiting %d; stats %+v", nChecks, acquired.Load(), abandoned.Load(), keptWaiting.Load(), st)
	if len(run) != 0 || len(wait) != 0 || f.Busy() {
		t.Fatalf("queues not empty at the end\n%s", fdump(&f))
	}
	// Interrupted counts waits abandoned before the grant; an abandon that
	// raced with a grant counts as acquired (and is released at once).
	if st.Interrupted > abandoned.Load() {
		t.Errorf("Stats.Interrupted = %d > %d abandoned", st.Interrupted, abandoned.Load())
	}
	if want := acquired.Load() + abandoned.Load() - st.Interrupted; st.Acquired != want {
		t.Errorf("Stats.Acquired = %d, want %d (successful Acquires + abandons that raced with the grant)", st.Acquired, want)
	}
	if st.Waits == 0 || st.Interrupted == 0 {
		t.Errorf("stats %+v: the stress test should produce waits and interrupted waits", st)
	}
	if !sharedWhole && st.MaxBypass > nGoroutines-1 {
		t.Errorf("MaxBypass = %d > %d: a whole-file lock was passed by more than the locks queued ahead of it", st.MaxBypass, nGoroutines-1)
	}
	// The file is idle and usable.
	l := wholeX(99)
	if !f.TryAcquire(l) {
		t.Fatal("whole-file lock refused on an idle file")
	}
	f.Release(l)
}

func fdump(f *File) string {
	r, w, st := f.Snapshot()
	var b strings.Builder
	b.WriteString("run queue:\n")
	for _, l := range r {
		fmt.Fprintf(&b, "  %s\n", infoDesc(l))
	}
	b.WriteString("wait queue:\n")
	for _, l := range w {
		fmt.Fprintf(&b, "  %s\n", infoDesc(l))
	}
	fmt.Fprintf(&b, "stats: %+v", st)
	return b.String()
}
