package core

import (
	"math/bits"
	"sync"

	"github.com/dnnfs/dnnfs/format"
)

// allocator is the DRAM free-space map: one bit per block of the data
// region, rebuilt at every mount from the live inodes. It is never on
// media, so a crash cannot leave it inconsistent.
type allocator struct {
	mu     sync.Mutex
	start  Blk      // first data block
	n      uint64   // data blocks
	bits   []uint64 // 1 = used
	nfree  uint64
	cursor uint64 // next-fit hint, relative to start
}

func (a *allocator) init(start Blk, total uint64) {
	a.start = start
	a.n = total - uint64(start)
	a.bits = make([]uint64, (a.n+63)/64)
	a.nfree = a.n
	// Bits past the end are permanently used.
	if r := a.n % 64; r != 0 {
		a.bits[len(a.bits)-1] = ^uint64(0) << r
	}
}

func (a *allocator) free() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nfree
}

func (a *allocator) used(i uint64) bool { return a.bits[i/64]&(1<<(i%64)) != 0 }

// markUsed marks [b, b+n) used during load; it reports false if any block
// was already used (two owners: corruption).
func (a *allocator) markUsed(b Blk, n uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	ok := true
	for i := uint64(b - a.start); i < uint64(b-a.start)+n; i++ {
		if a.used(i) {
			ok = false
			continue
		}
		a.bits[i/64] |= 1 << (i % 64)
		a.nfree--
	}
	return ok
}

// release returns [b, b+n) to the free map.
func (a *allocator) release(b Blk, n uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := uint64(b - a.start); i < uint64(b-a.start)+n; i++ {
		if a.used(i) {
			a.bits[i/64] &^= 1 << (i % 64)
			a.nfree++
		}
	}
}

// alloc takes up to want blocks in one run, preferring to start at goal
// (to keep a file contiguous), then the next run of at least
// min(want, 256) free blocks after the cursor, then any free block. It
// returns the run, or n == 0 when the pool is full.
func (a *allocator) alloc(goal Blk, want uint64) (Blk, uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nfree == 0 || want == 0 {
		return 0, 0
	}
	take := func(i uint64) (Blk, uint64) {
		n := uint64(0)
		for n < want && i+n < a.n && !a.used(i+n) {
			a.bits[(i+n)/64] |= 1 << ((i + n) % 64)
			n++
		}
		a.nfree -= n
		a.cursor = i + n
		return a.start + Blk(i), n
	}
	if goal >= a.start && uint64(goal-a.start) < a.n && !a.used(uint64(goal-a.start)) {
		return take(uint64(goal - a.start))
	}
	need := min(want, 256)
	if i, ok := a.findRun(a.cursor, a.n, need); ok {
		return take(i)
	}
	if i, ok := a.findRun(0, a.n, need); ok {
		return take(i)
	}
	if i, ok := a.findRun(0, a.n, 1); ok {
		return take(i)
	}
	return 0, 0
}

// allocContig takes exactly n contiguous blocks, preferring goal; ok is
// false when no such run exists (the pool may still have n free blocks
// in pieces).
func (a *allocator) allocContig(goal Blk, n uint64) (Blk, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n == 0 || n > a.nfree {
		return 0, false
	}
	i, ok := uint64(0), false
	if goal >= a.start && uint64(goal-a.start) < a.n {
		if j, found := a.findRun(uint64(goal-a.start), uint64(goal-a.start)+1, n); found {
			i, ok = j, true
		}
	}
	if !ok {
		if i, ok = a.findRun(a.cursor, a.n, n); !ok {
			i, ok = a.findRun(0, a.n, n)
		}
	}
	if !ok || i+n > a.n {
		return 0, false
	}
	for k := i; k < i+n; k++ {
		a.bits[k/64] |= 1 << (k % 64)
	}
	a.nfree -= n
	a.cursor = i + n
	return a.start + Blk(i), true
}

// findRun finds a run of need free blocks starting in [from, to).
func (a *allocator) findRun(from, to, need uint64) (uint64, bool) {
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
		for j < a.n && j-i < need && !a.used(j) {
			j++
		}
		if j-i >= need {
			return i, true
		}
		i = j + 1
	}
	return 0, false
}

// allocRuns allocates exactly n blocks, possibly in several runs, starting
// near goal. On failure it releases what it took and returns nil.
func (a *allocator) allocRuns(goal Blk, n uint64) []format.Extent {
	var runs []format.Extent
	for got := uint64(0); got < n; {
		b, k := a.alloc(goal, n-got)
		if k == 0 {
			for _, r := range runs {
				a.release(r.Phys, r.Len)
			}
			return nil
		}
		runs = append(runs, format.Extent{Phys: b, Len: k})
		got += k
		goal = b + Blk(k)
	}
	return runs
}
