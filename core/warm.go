package core

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

// Warm blocks (DESIGN.md §Warm blocks): on an emulated pool, blocks a
// change frees stay in the pool file (warm) instead of being punched at
// once, so the next write into them (a checkpoint saved over the last
// one) finds its memory there. They are punched later: the oldest first
// when more than the cap are warm, and any left unused for the decay time.

const (
	// DefaultWarmBytesMax is the most that the default cap keeps warm.
	// A checkpoint save writes a new file and renames it over the old
	// one: the old file's blocks are what the next save wants, so the cap
	// should hold a checkpoint. A pool that holds a checkpoint twice (old
	// and new while saving) frees up to half of itself at the rename, so
	// the default is half the pool, and at most 4 GiB of memory kept for
	// free blocks.
	DefaultWarmBytesMax = 4 << 30
	// DefaultWarmDecay is how long a warm block may stay unused before it
	// is punched: long enough to span the gap between two checkpoint
	// saves of a training job (tens of seconds), short enough that memory
	// a deleted file held comes back within a minute or two.
	DefaultWarmDecay = 60 * time.Second
	// warmPiece is the most blocks one punch claims (16 MiB): the claimed
	// blocks are out of the allocator's reach until punched.
	warmPiece = 4096
)

// DefaultWarmBytes is the warm cap of a pool of poolBytes: half of it,
// at most DefaultWarmBytesMax.
func DefaultWarmBytes(poolBytes int64) int64 {
	return min(poolBytes/2, DefaultWarmBytesMax)
}

// warmer is the warm-block policy of an FS.
type warmer struct {
	on    bool   // emulated pool and a cap above zero
	keep  uint64 // cap, blocks
	decay time.Duration

	mu         sync.Mutex // guards live, stop, done
	live       bool       // stamped: the decay may run (Stamp)
	stop, done chan struct{}

	punchedDecay atomic.Uint64 // bytes punched because unused for the decay time
	punchedCap   atomic.Uint64 // bytes punched because over the cap (or found over it at mount)
}

// initWarm sets the policy from the options; only an emulated pool keeps
// blocks warm (DAX media clear freed blocks, DRAM media leave them).
func (fs *FS) initWarm(opts Options) {
	bytes := opts.WarmBytes
	if bytes == 0 {
		bytes = DefaultWarmBytes(fs.m.Size())
	}
	w := &fs.warm
	w.on = fs.m.Kind() == pmem.Emulated && bytes > 0
	w.keep = uint64(max(bytes, 0)) / format.BlockSize
	w.decay = opts.WarmDecay
	if w.decay == 0 {
		w.decay = DefaultWarmDecay
	}
}

// backedMedium is a medium that can tell which of its bytes hold storage
// (pmem's file media).
type backedMedium interface {
	Backed(off, n int64, fn func(off, n int64)) error
}

// findWarm marks warm the free blocks the pool file still backs: blocks
// freed but not punched before the last unmount or crash. Their memory
// (or disk space) is then reused first, or punched by the cap and the
// decay like any other warm block. Best effort: a medium that cannot
// tell leaves them unknown (backed until reused), as before.
func (fs *FS) findWarm() {
	bm, ok := fs.m.(backedMedium)
	if !fs.warm.on || !ok {
		return
	}
	now := time.Now()
	start := int64(fs.sb.DataStart.Off())
	err := bm.Backed(start, fs.m.Size()-start, func(off, n int64) {
		b := Blk(off / format.BlockSize)
		end := (off + n + format.BlockSize - 1) / format.BlockSize
		fs.alloc.MarkWarm(b, uint64(end)-uint64(b), now)
	})
	if err != nil {
		fs.log.Warn("finding the free blocks still backed in the pool file; they stay until reused", zap.Error(err))
	}
	// Nothing is punched before Stamp (Options.DeferStamp): the decayer
	// applies the cap and the decay once the mount is live.
}

// releaseFreed returns the blocks a committed change freed to the
// allocator: warm if the pool keeps them so (then punching what exceeds
// the cap), else as releaseBlocks does.
func (fs *FS) releaseFreed(freed []format.Extent) {
	if !fs.warm.on || fs.closed.Load() {
		for _, e := range freed {
			fs.releaseBlocks(e.Phys, e.Len)
		}
		return
	}
	now := time.Now()
	for _, e := range freed {
		fs.alloc.ReleaseWarm(e.Phys, e.Len, now)
	}
	fs.punchWarm(time.Time{}, fs.warm.keep, &fs.warm.punchedCap)
	fs.startDecay()
}

// punchWarm punches warm blocks released before olderThan or beyond keep,
// oldest first, a piece at a time without holding the allocator's lock
// across the punch; it adds the bytes to count.
func (fs *FS) punchWarm(olderThan time.Time, keep uint64, count *atomic.Uint64) {
	for {
		runs := fs.alloc.TakeWarm(olderThan, keep, warmPiece)
		if len(runs) == 0 {
			return
		}
		for _, r := range runs {
			// Best effort, as releaseBlocks: the blocks are free either
			// way, and whoever takes them next overwrites or clears them.
			if err := fs.m.Punch(int64(r.Phys.Off()), int64(r.Len*format.BlockSize)); err != nil {
				fs.log.Debug("punching warm blocks", zap.Uint64("block", uint64(r.Phys)), zap.Uint64("blocks", r.Len), zap.Error(err))
			}
			count.Add(r.Len * format.BlockSize)
		}
		fs.alloc.ReturnPunched(runs)
	}
}

// liveWarm lets the decayer run from now on (Stamp), and starts it if
// blocks are warm already (findWarm, orphans freed by Open).
func (fs *FS) liveWarm() {
	fs.warm.mu.Lock()
	fs.warm.live = true
	fs.warm.mu.Unlock()
	if fs.alloc.Warm() > 0 {
		fs.startDecay()
	}
}

// startDecay starts the goroutine that punches blocks warm for longer
// than the decay time (and any over the cap), unless it runs, the mount
// is not live yet or the FS is closing.
func (fs *FS) startDecay() {
	w := &fs.warm
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop != nil || !w.live || fs.closed.Load() {
		return
	}
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go fs.decayer(w.stop, w.done)
}

// decayer punches, every quarter of the decay time, the warm blocks over
// the cap and those released more than the decay time ago, until stop.
func (fs *FS) decayer(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(max(fs.warm.decay/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			fs.punchWarm(time.Time{}, fs.warm.keep, &fs.warm.punchedCap)
			fs.punchDecayed(now)
		}
	}
}

// punchDecayed punches the warm blocks released before now less the
// decay time.
func (fs *FS) punchDecayed(now time.Time) {
	fs.punchWarm(now.Add(-fs.warm.decay), ^uint64(0), &fs.warm.punchedDecay)
}

// stopWarm ends the decay goroutine. Warm blocks stay in the pool file:
// the next mount finds them (findWarm), so a daemon restarted between two
// checkpoint saves still reuses them, and its decay punches them if not.
func (fs *FS) stopWarm() {
	w := &fs.warm
	w.mu.Lock()
	stop, done := w.stop, w.done
	w.stop = nil
	w.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// WarmStats says how many bytes are warm and how many were punched.
type WarmStats struct {
	Warm, PunchedDecay, PunchedCap uint64
	Cap                            uint64 // bytes; 0 when the pool keeps none warm
}

// Warm returns the warm-block counters.
func (fs *FS) Warm() WarmStats {
	s := WarmStats{Warm: fs.alloc.Warm() * format.BlockSize,
		PunchedDecay: fs.warm.punchedDecay.Load(), PunchedCap: fs.warm.punchedCap.Load()}
	if fs.warm.on {
		s.Cap = fs.warm.keep * format.BlockSize
	}
	return s
}
