package alloc

import (
	"math/bits"
	"sync"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

// Map is the free-space map of blocks [start, total). It is safe for
// concurrent use.
type Map struct {
	mu     sync.Mutex // guards every field below; *Locked methods expect it held
	start  format.Blk // first data block
	n      uint64     // data blocks
	bits   []uint64   // 1 = used
	nfree  uint64
	cursor uint64 // next-fit hint, relative to start

	// Warm blocks (warm.go): free blocks still backed by memory in an
	// emulated pool's file, preferred by Alloc. warm ⊆ free.
	warm       []uint64 // 1 = free and warm; nil until the first warm block
	nwarm      uint64
	warmQ      []warmRun // in release order, oldest first; may be stale
	warmHead   int       // first live entry of warmQ
	warmCursor uint64    // next-fit hint among warm runs
	// Blocks taken by TakeWarm for punching: used in bits, yet counted
	// free (they are); an allocation that finds nothing else waits.
	claimed uint64
	punched *sync.Cond // signalled when claimed blocks come back
}

// warmRun is one release of warm blocks, for oldest-first punching.
type warmRun struct {
	b, n uint64 // relative to start
	t    time.Time
}

// New returns a map of blocks [start, total), all free.
func New(start format.Blk, total uint64) *Map {
	a := &Map{start: start}
	if total > uint64(start) {
		a.n = total - uint64(start)
	}
	a.bits = make([]uint64, (a.n+63)/64)
	a.punched = sync.NewCond(&a.mu)
	a.nfree = a.n
	// Bits past the end are permanently used.
	if r := a.n % 64; r != 0 {
		a.bits[len(a.bits)-1] = ^uint64(0) << r
	}
	return a
}

// Blocks is the number of blocks the map covers.
func (a *Map) Blocks() uint64 { return a.n }

// Free is the number of free blocks (blocks being punched count: they
// are free, and an allocation waits for them).
func (a *Map) Free() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nfree + a.claimed
}

// Used is the number of used blocks.
func (a *Map) Used() uint64 { return a.n - a.Free() }

// in reports whether [b, b+n) lies inside the map.
func (a *Map) in(b format.Blk, n uint64) bool {
	return b >= a.start && uint64(b-a.start) <= a.n && n <= a.n-uint64(b-a.start)
}

func (a *Map) usedLocked(i uint64) bool { return a.bits[i/64]&(1<<(i%64)) != 0 }

// setUsedLocked marks free block i used; it is no longer warm.
func (a *Map) setUsedLocked(i uint64) {
	a.bits[i/64] |= 1 << (i % 64)
	a.nfree--
	if a.nwarm > 0 && a.warm[i/64]&(1<<(i%64)) != 0 {
		a.warm[i/64] &^= 1 << (i % 64)
		a.nwarm--
	}
}

// IsUsed reports whether block b is used (blocks outside the map are).
func (a *Map) IsUsed(b format.Blk) bool {
	if !a.in(b, 1) {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.usedLocked(uint64(b - a.start))
}

// MarkUsed marks [b, b+n) used while the map is rebuilt; it reports false
// if any block was already used (two owners: corruption), or marks nothing
// and reports false if the run lies outside the map.
func (a *Map) MarkUsed(b format.Blk, n uint64) bool {
	if !a.in(b, n) {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ok := true
	for i := uint64(b - a.start); i < uint64(b-a.start)+n; i++ {
		if a.usedLocked(i) {
			ok = false
			continue
		}
		a.setUsedLocked(i)
	}
	return ok
}

// Release returns [b, b+n) to the free map; blocks already free or
// outside the map are left alone.
func (a *Map) Release(b format.Blk, n uint64) {
	if !a.in(b, n) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := uint64(b - a.start); i < uint64(b-a.start)+n; i++ {
		if a.usedLocked(i) {
			a.bits[i/64] &^= 1 << (i % 64)
			a.nfree++
		}
	}
}

// Alloc takes up to want blocks in one run, preferring to start at goal
// (to keep a file contiguous), then a warm run of at least min(want, 256)
// blocks (warm.go), then the next free run of that length after the
// cursor, then any warm block, then any free block. It returns the run,
// or n == 0 when the map is full.
func (a *Map) Alloc(goal format.Blk, want uint64) (format.Blk, uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if b, n := a.allocLocked(goal, want); n > 0 || a.claimed == 0 || want == 0 {
			return b, n
		}
		a.punched.Wait() // only blocks being punched are left
	}
}

func (a *Map) allocLocked(goal format.Blk, want uint64) (format.Blk, uint64) {
	if a.nfree == 0 || want == 0 {
		return 0, 0
	}
	take := func(i uint64) (format.Blk, uint64) {
		n := uint64(0)
		for n < want && i+n < a.n && !a.usedLocked(i+n) {
			a.setUsedLocked(i + n)
			n++
		}
		a.cursor = i + n
		return a.start + format.Blk(i), n
	}
	if goal >= a.start && uint64(goal-a.start) < a.n && !a.usedLocked(uint64(goal-a.start)) {
		return take(uint64(goal - a.start))
	}
	need := min(want, 256)
	if i, ok := a.findWarmLocked(need); ok {
		cursor := a.cursor
		b, n := take(i)
		a.warmCursor, a.cursor = a.cursor, cursor // the cold next-fit hint stays
		return b, n
	}
	if i, ok := a.findRunLocked(a.cursor, a.n, need); ok {
		return take(i)
	}
	if i, ok := a.findRunLocked(0, a.n, need); ok {
		return take(i)
	}
	if i, ok := a.findWarmLocked(1); ok {
		return take(i)
	}
	if i, ok := a.findRunLocked(0, a.n, 1); ok {
		return take(i)
	}
	return 0, 0
}

// AllocContig takes exactly n contiguous blocks, preferring goal; ok is
// false when no such run exists (the map may still have n free blocks
// in pieces).
func (a *Map) AllocContig(goal format.Blk, n uint64) (format.Blk, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if b, ok := a.allocContigLocked(goal, n); ok || a.claimed == 0 || n == 0 {
			return b, ok
		}
		a.punched.Wait() // the run may be among the blocks being punched
	}
}

func (a *Map) allocContigLocked(goal format.Blk, n uint64) (format.Blk, bool) {
	if n == 0 || n > a.nfree {
		return 0, false
	}
	i, ok := uint64(0), false
	if goal >= a.start && uint64(goal-a.start) < a.n {
		if j, found := a.findRunLocked(uint64(goal-a.start), uint64(goal-a.start)+1, n); found {
			i, ok = j, true
		}
	}
	if !ok {
		if i, ok = a.findRunLocked(a.cursor, a.n, n); !ok {
			i, ok = a.findRunLocked(0, a.n, n)
		}
	}
	if !ok || i+n > a.n {
		return 0, false
	}
	for k := i; k < i+n; k++ {
		a.setUsedLocked(k)
	}
	a.cursor = i + n
	return a.start + format.Blk(i), true
}

// findRunLocked finds a run of need free blocks starting in [from, to).
func (a *Map) findRunLocked(from, to, need uint64) (uint64, bool) {
	i := from
	for i < to {
		sh := i % 64
		w := a.bits[i/64] >> sh
		if w == ^uint64(0)>>sh { // rest of the word used
			i = (i/64 + 1) * 64
			continue
		}
		if w&1 != 0 { // skip this word's run of used blocks at once
			i += uint64(bits.TrailingZeros64(^w))
			continue
		}
		j := i
		for j < a.n && j-i < need && !a.usedLocked(j) {
			j++
		}
		if j-i >= need {
			return i, true
		}
		i = j + 1
	}
	return 0, false
}

// AllocRuns allocates exactly n blocks, possibly in several runs, starting
// near goal. On failure it releases what it took and returns nil.
func (a *Map) AllocRuns(goal format.Blk, n uint64) []format.Extent {
	var runs []format.Extent
	for got := uint64(0); got < n; {
		b, k := a.Alloc(goal, n-got)
		if k == 0 {
			for _, r := range runs {
				a.Release(r.Phys, r.Len)
			}
			return nil
		}
		runs = append(runs, format.Extent{Phys: b, Len: k})
		got += k
		goal = b + format.Blk(k)
	}
	return runs
}
