package embedding

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/format"
)

// migrator is the background balancer (DESIGN.md §Migration).
type migrator struct {
	mu    sync.Mutex // one balance pass or manual move at a time
	last  time.Time
	t     *Tier
	every time.Duration
	stopc chan struct{}
	wg    sync.WaitGroup

	moves, replications atomic.Uint64
}

func (m *migrator) start(t *Tier, every time.Duration) {
	m.t, m.every = t, every
	if every <= 0 {
		return
	}
	m.stopc = make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-m.stopc:
				return
			case <-tk.C:
				m.t.balance()
			}
		}
	}()
}

func (m *migrator) stop() {
	if m.stopc != nil {
		close(m.stopc)
		m.wg.Wait()
		m.stopc = nil
	}
}

// Balancing policy thresholds.
const (
	// imbalance: the busiest device's read load must exceed the idlest's
	// by this factor before a hot shard is replicated.
	imbalance = 1.5
	// minBusy: ...and be busy at least this fraction of the period (or,
	// unthrottled, read this many bytes per second).
	minBusy        = 0.2
	minUnthrottled = 64 << 20
	// fullness above which shards move off a device, and below which a
	// device may take them.
	highWater, lowWater = 0.90, 0.75
)

// beginChange claims shard i for a move or replica change: one at a time
// per shard, and writers held off (the write gate) until done is called.
func (tb *Table) beginChange(i int) (sh *shard, done func(), err error) {
	if i < 0 || i >= len(tb.shards) {
		return nil, nil, fmt.Errorf("%w: shard %d of %d", ErrInvalid, i, len(tb.shards))
	}
	sh = &tb.shards[i]
	if !sh.moving.CompareAndSwap(false, true) {
		return nil, nil, ErrMoving
	}
	sh.wgate.Lock()
	return sh, func() { sh.wgate.Unlock(); sh.moving.Store(false) }, nil
}

// MoveShard moves shard i of tb to device to (replicate=false), or adds a
// replica there (replicate=true); to = 0 picks a device by placement.
// Persist order (FORMAT.md): copy, fdatasync the copy, one journaled
// entry, then readers switch; the old space is reused after the reads in
// flight on it finish. Writes to the shard wait meanwhile; reads go on.
func (t *Tier) MoveShard(tb *Table, i int, to format.DevID, replicate bool) error {
	sh, done, err := tb.beginChange(i)
	if err != nil {
		return err
	}
	defer done()
	old := sh.cur.Load()
	e := old.e
	span := int64(tb.hdr.ShardSpan(i))
	if replicate && e.RDev != 0 {
		return fmt.Errorf("%w: shard %d already has a replica on device %d", ErrInvalid, i, e.RDev)
	}
	var dst *Device
	var off int64
	if to == 0 {
		counts := map[format.DevID]int{}
		for k := range tb.shards {
			counts[tb.shards[k].cur.Load().e.Dev]++
		}
		var ok bool
		if dst, off, ok = t.place(span, counts, len(tb.shards), e.Dev, e.RDev); !ok {
			return fmt.Errorf("%w: no other device has %d bytes free for shard %d (on device %d)", ErrNoSpace, span, i, e.Dev)
		}
	} else {
		if dst = t.dev(to); dst == nil {
			return fmt.Errorf("%w: device %d is not attached", ErrInvalid, to)
		}
		if to == e.Dev || to == e.RDev {
			return fmt.Errorf("%w: shard %d already has a copy on device %d", ErrInvalid, i, to)
		}
		var ok bool
		if off, ok = dst.space.reserve(span); !ok {
			return fmt.Errorf("%w: device %d has no %d bytes free", ErrNoSpace, to, span)
		}
	}
	start := time.Now()
	if err := t.copySpan(tb, t.dev(e.Dev), int64(e.Off), dst, off, span); err != nil {
		dst.space.release(off, span)
		return err
	}
	if err := dst.io.Sync(); err != nil {
		dst.space.release(off, span)
		return fmt.Errorf("SSD device %d (%s): fdatasync after copying shard %d: %w", dst.ID, dst.Dir, i, err)
	}
	ne := e
	ne.Gen++
	if replicate {
		ne.RDev, ne.ROff = dst.ID, uint64(off)
	} else {
		ne.Dev, ne.Off = dst.ID, uint64(off)
	}
	if err := t.meta.SetShard(tb.in, i, ne); err != nil {
		dst.space.release(off, span)
		return fmt.Errorf("recording the move of shard %d: %w", i, err)
	}
	sh.cur.Store(&location{e: ne})
	dst.moves.Add(1)
	if replicate {
		t.mig.replications.Add(1)
		// No copy is freed, but readers pinned on old still read its
		// primary, which the new location names too. Wait for them before
		// releasing the shard: the next change of it retires a copy
		// waiting only for the pins of the location it supersedes (see
		// retire), so a reader of old left behind could read the primary
		// after its space was reused by another shard.
		t.drain(old)
	} else {
		t.mig.moves.Add(1)
		t.retire(old, e.Dev, int64(e.Off), span)
	}
	t.log.Info("embedding shard moved", zap.Uint64("table_ino", uint64(tb.in.Ino)), zap.Int("shard", i),
		zap.Bool("replica", replicate), zap.Uint16("from_device", uint16(e.Dev)), zap.Uint16("to_device", uint16(dst.ID)),
		zap.Int64("bytes", span), zap.Duration("took", time.Since(start)))
	return nil
}

// DropReplica removes shard i's replica (journaled), freeing its space
// once the reads in flight on it finish.
func (t *Tier) DropReplica(tb *Table, i int) error {
	sh, done, err := tb.beginChange(i)
	if err != nil {
		return err
	}
	defer done()
	old := sh.cur.Load()
	e := old.e
	if e.RDev == 0 {
		return fmt.Errorf("%w: shard %d has no replica", ErrInvalid, i)
	}
	ne := e
	ne.Gen++
	ne.RDev, ne.ROff = 0, 0
	if err := t.meta.SetShard(tb.in, i, ne); err != nil {
		return err
	}
	sh.cur.Store(&location{e: ne})
	t.retire(old, e.RDev, int64(e.ROff), int64(tb.hdr.ShardSpan(i)))
	return nil
}

// retire frees a superseded copy once no piece pins the old location.
// Only old's pins are waited for, which is enough because every change of
// a shard drains the location it supersedes before the shard is released
// (MoveShard, DropReplica), even when it frees no copy: so when a copy is
// retired, old is the only superseded location a reader can still hold,
// and the space is reused (DESIGN.md §Placement) only once no reader can
// reach it (DESIGN.md §Migration: readers see the old location or the new
// one).
func (t *Tier) retire(old *location, dev format.DevID, off, span int64) {
	t.drain(old)
	if d := t.dev(dev); d != nil {
		d.space.release(off, span)
	}
}

// drain waits until no piece pins the superseded location old (it is no
// longer current, so no new pin can take hold: see Table.pin).
func (t *Tier) drain(old *location) {
	for old.refs.Load() > 0 {
		time.Sleep(100 * time.Microsecond)
	}
}

// copySpan copies span bytes between devices through the loaders (so the
// device models and the large class account for it), MaxPiece at a time.
func (t *Tier) copySpan(tb *Table, src *Device, soff int64, dst *Device, doff, span int64) error {
	if src == nil {
		return fmt.Errorf("%w: source device not attached", ErrNoTier)
	}
	step := int64(t.sched.cfg.MaxPiece)
	rows := int(step / max(tb.rowBytes, 1))
	buf := alignedBuf(int(step))
	for k := int64(0); k < span; k += step {
		n := min(step, span-k)
		b := buf[:n]
		if err := t.run(rows, int(n), []*piece{{dev: src, off: soff + k, buf: b}}); err != nil {
			return err
		}
		if err := t.run(rows, int(n), []*piece{{dev: dst, off: doff + k, buf: b, write: true}}); err != nil {
			return err
		}
	}
	return nil
}

// balance is one migrator pass: at most one replication (read load) and
// one move (capacity).
func (t *Tier) balance() {
	m := &t.mig
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	period := now.Sub(m.last)
	m.last = now
	if period <= 0 || period > 10*m.every {
		period = m.every
	}
	type devLoad struct {
		d    *Device
		load float64 // fraction of the period busy (throttled), or bytes/s
		full float64
	}
	var ls []devLoad
	for _, d := range t.att {
		b := float64(d.windowBytes.Swap(0))
		l := b / period.Seconds()
		if d.model.BW > 0 {
			l /= d.model.BW
		} else {
			l /= minUnthrottled / minBusy // same scale: minBusy at minUnthrottled bytes/s
		}
		st := d.space.stats()
		ls = append(ls, devLoad{d, l, float64(st.Used) / float64(max(st.Capacity, 1))})
	}
	// Heat of every shard this period.
	type hot struct {
		tb   *Table
		i    int
		heat uint64
	}
	var shards []hot
	t.mu.Lock()
	for _, tb := range t.tables {
		for i := range tb.shards {
			shards = append(shards, hot{tb, i, tb.shards[i].heat.Swap(0)})
		}
	}
	t.mu.Unlock()
	if len(ls) < 2 {
		return
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].load > ls[j].load })
	busy, idle := ls[0], ls[len(ls)-1]
	if busy.load >= minBusy && busy.load > imbalance*idle.load {
		sort.Slice(shards, func(i, j int) bool { return shards[i].heat > shards[j].heat })
		for _, h := range shards {
			if h.heat == 0 {
				break
			}
			e := h.tb.shards[h.i].cur.Load().e
			if e.Dev != busy.d.ID || e.RDev != 0 {
				continue
			}
			if err := t.MoveShard(h.tb, h.i, idle.d.ID, true); err != nil {
				t.log.Warn("migrator: replicating a hot shard failed", zap.Uint64("table_ino", uint64(h.tb.in.Ino)),
					zap.Int("shard", h.i), zap.Uint16("to_device", uint16(idle.d.ID)), zap.Error(err))
			}
			break
		}
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].full > ls[j].full })
	fullest, emptiest := ls[0], ls[len(ls)-1]
	if fullest.full > highWater && emptiest.full < lowWater {
		// Replicas go first, then the coldest primary.
		sort.Slice(shards, func(i, j int) bool { return shards[i].heat < shards[j].heat })
		for _, h := range shards {
			if e := h.tb.shards[h.i].cur.Load().e; e.RDev == fullest.d.ID {
				_ = t.DropReplica(h.tb, h.i)
				return
			}
		}
		for _, h := range shards {
			e := h.tb.shards[h.i].cur.Load().e
			if e.Dev != fullest.d.ID || e.RDev == emptiest.d.ID {
				continue
			}
			if err := t.MoveShard(h.tb, h.i, emptiest.d.ID, false); err != nil {
				t.log.Warn("migrator: moving a shard off a full device failed", zap.Uint64("table_ino", uint64(h.tb.in.Ino)),
					zap.Int("shard", h.i), zap.Error(err))
			}
			return
		}
	}
}
