package alloc

import (
	"math/bits"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

// Warm blocks (DESIGN.md §Warm blocks). On an emulated pool a freed
// block's memory stays in the pool file until the block is punched; the
// next write into a punched block pays for fresh memory again. The map
// keeps freed blocks warm (free, not yet punched) in release order, Alloc
// prefers them when its goal is taken, and TakeWarm hands the oldest (or
// the ones past a cap) to the caller to punch. Nothing here is stored on
// media: after a mount every free block is cold.

// ReleaseWarm returns [b, b+n) to the free map as warm blocks released at
// t; blocks already free or outside the map are left alone, as by Release.
func (a *Map) ReleaseWarm(b format.Blk, n uint64, t time.Time) {
	if !a.in(b, n) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.warmBitsLocked()
	i0 := uint64(b - a.start)
	for i := i0; i < i0+n; i++ {
		if a.usedLocked(i) {
			a.bits[i/64] &^= 1 << (i % 64)
			a.nfree++
			a.warm[i/64] |= 1 << (i % 64)
			a.nwarm++
		}
	}
	// One release of contiguous extents (a file's) is one entry.
	if k := len(a.warmQ) - 1; k >= a.warmHead && a.warmQ[k].b+a.warmQ[k].n == i0 && a.warmQ[k].t.Equal(t) {
		a.warmQ[k].n += n
		return
	}
	a.warmQ = append(a.warmQ, warmRun{b: i0, n: n, t: t})
}

// MarkWarm marks the free blocks of [b, b+n) warm as if released at t:
// blocks a mount finds still backed in the pool file (freed but not
// punched before the last unmount or crash).
func (a *Map) MarkWarm(b format.Blk, n uint64, t time.Time) {
	if !a.in(b, n) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.warmBitsLocked()
	i0 := uint64(b - a.start)
	for i := i0; i < i0+n; {
		if a.usedLocked(i) || a.warm[i/64]&(1<<(i%64)) != 0 {
			i++
			continue
		}
		j := i
		for j < i0+n && !a.usedLocked(j) && a.warm[j/64]&(1<<(j%64)) == 0 {
			a.warm[j/64] |= 1 << (j % 64)
			j++
		}
		a.nwarm += j - i
		a.warmQ = append(a.warmQ, warmRun{b: i, n: j - i, t: t})
		i = j
	}
}

// warmBitsLocked makes the warm bitmap: a map that never has a warm
// block (the checker's, a DRAM pool's) does without its bit a block.
func (a *Map) warmBitsLocked() {
	if a.warm == nil {
		a.warm = make([]uint64, len(a.bits))
	}
}

// Warm is the number of warm blocks.
func (a *Map) Warm() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nwarm
}

// TakeWarm claims up to max warm blocks, oldest released first, that were
// released before olderThan or that are more than keep warm blocks, for
// the caller to punch; nil when there are none. The claimed blocks are
// neither allocated nor counted used meanwhile (an allocation that finds
// nothing else waits for them); the caller hands every run back with
// ReturnPunched, punched or not.
func (a *Map) TakeWarm(olderThan time.Time, keep, max uint64) []format.Extent {
	a.mu.Lock()
	defer a.mu.Unlock()
	var runs []format.Extent
	got := uint64(0)
	for a.warmHead < len(a.warmQ) && got < max {
		e := &a.warmQ[a.warmHead]
		if a.nwarm <= keep && !e.t.Before(olderThan) {
			break
		}
		// The entry's blocks still warm (some may have been allocated),
		// oldest first, as far as max allows.
		i, end := e.b, e.b+e.n
		for i < end && got < max && (a.nwarm > keep || e.t.Before(olderThan)) {
			if a.warm[i/64]&(1<<(i%64)) == 0 {
				i++
				continue
			}
			j := i
			for j < end && got+(j-i) < max && a.warm[j/64]&(1<<(j%64)) != 0 &&
				(a.nwarm-(j-i) > keep || e.t.Before(olderThan)) {
				j++
			}
			for k := i; k < j; k++ {
				a.bits[k/64] |= 1 << (k % 64)
				a.warm[k/64] &^= 1 << (k % 64)
			}
			a.nwarm -= j - i
			a.nfree -= j - i
			a.claimed += j - i
			got += j - i
			runs = append(runs, format.Extent{Phys: a.start + format.Blk(i), Len: j - i})
			i = j
		}
		if i < end {
			e.n, e.b = end-i, i
			break
		}
		a.warmHead++
	}
	if a.warmHead == len(a.warmQ) {
		a.warmQ, a.warmHead = a.warmQ[:0], 0
	} else if a.warmHead > len(a.warmQ)/2 && a.warmHead > 64 {
		a.warmQ = a.warmQ[:copy(a.warmQ, a.warmQ[a.warmHead:])]
		a.warmHead = 0
	}
	return runs
}

// ReturnPunched gives back runs TakeWarm claimed, as cold free blocks.
func (a *Map) ReturnPunched(runs []format.Extent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range runs {
		i0 := uint64(r.Phys - a.start)
		for i := i0; i < i0+r.Len; i++ {
			a.bits[i/64] &^= 1 << (i % 64)
		}
		a.nfree += r.Len
		a.claimed -= r.Len
	}
	a.punched.Broadcast()
}

// findWarmLocked finds a run of need warm blocks, searching from the warm
// cursor and then from the start.
func (a *Map) findWarmLocked(need uint64) (uint64, bool) {
	if a.nwarm < need {
		return 0, false
	}
	if i, ok := a.findWarmRunLocked(a.warmCursor, a.n, need); ok {
		return i, true
	}
	return a.findWarmRunLocked(0, min(a.warmCursor+need, a.n), need)
}

// findWarmRunLocked finds a run of need warm blocks starting in [from, to).
func (a *Map) findWarmRunLocked(from, to, need uint64) (uint64, bool) {
	i := from
	for i < to {
		sh := i % 64
		w := a.warm[i/64] >> sh
		if w == 0 { // rest of the word cold or used
			i = (i/64 + 1) * 64
			continue
		}
		i += uint64(bits.TrailingZeros64(w)) // first warm block
		if i >= to {
			break
		}
		j := i
		for j < a.n && j-i < need && a.warm[j/64]&(1<<(j%64)) != 0 {
			j++
		}
		if j-i >= need {
			return i, true
		}
		i = j + 1
	}
	return 0, false
}
