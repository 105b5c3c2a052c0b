package cluster

import (
	"container/list"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/core"
)

// Eviction (DESIGN §Cluster, "The pool as a cache"): the chunks a node
// filled into its pool are a cache of bytes that are in S3 (and maybe at
// peers). When the pool's free space falls below the low watermark
// (--cluster-cache-min-free) before a fill stores a chunk, or a store
// fails for want of space, the least recently read clean chunks leave the
// pool: state first, then the bytes.

// DefaultCacheMinFreePct is --cluster-cache-min-free's default: this share
// of the pool is kept free of cluster chunks.
const DefaultCacheMinFreePct = 10

// chunkKey names a chunk of a file's local copy (whatever its version:
// the entry of a chunk that is no longer present goes when it is met).
type chunkKey struct {
	f *file
	i namespace.ChunkIdx
}

// chunkLRU orders the chunks of the pool by their last read, and counts
// the reads using them right now (pins). Its own lock only: it is taken
// under a file's mu, never the other way round.
type chunkLRU struct {
	mu   sync.Mutex
	l    *list.List // of chunkKey; front: least recently read
	at   map[chunkKey]*list.Element
	pins map[chunkKey]int
}

func newChunkLRU() *chunkLRU {
	return &chunkLRU{l: list.New(), at: map[chunkKey]*list.Element{}, pins: map[chunkKey]int{}}
}

// touchLocked makes k the most recently read.
func (c *chunkLRU) touchLocked(k chunkKey) {
	if e, ok := c.at[k]; ok {
		c.l.MoveToBack(e)
		return
	}
	c.at[k] = c.l.PushBack(k)
}

// touch makes k the most recently read.
func (c *chunkLRU) touch(k chunkKey) {
	c.mu.Lock()
	c.touchLocked(k)
	c.mu.Unlock()
}

// remove forgets k (evicted, or no longer present).
func (c *chunkLRU) remove(k chunkKey) {
	c.mu.Lock()
	if e, ok := c.at[k]; ok {
		c.l.Remove(e)
		delete(c.at, k)
	}
	c.mu.Unlock()
}

// pin marks ks in use by a read (and read now); unpin ends that.
func (c *chunkLRU) pin(ks []chunkKey) {
	c.mu.Lock()
	for _, k := range ks {
		c.pins[k]++
		c.touchLocked(k)
	}
	c.mu.Unlock()
}

func (c *chunkLRU) unpin(ks []chunkKey) {
	c.mu.Lock()
	for _, k := range ks {
		if c.pins[k]--; c.pins[k] <= 0 {
			delete(c.pins, k)
		}
	}
	c.mu.Unlock()
}

func (c *chunkLRU) pinned(k chunkKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pins[k] > 0
}

// oldest returns the least recently read chunk that is not pinned and not
// in skip.
func (c *chunkLRU) oldest(skip map[chunkKey]bool) (chunkKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.l.Front(); e != nil; e = e.Next() {
		k := e.Value.(chunkKey)
		if !skip[k] && c.pins[k] == 0 {
			return k, true
		}
	}
	return chunkKey{}, false
}

// adoptOld puts the chunks not ordered yet before all others, in the order
// given: chunks present but never read since the mount (filled before a
// restart, or written here) are older than any read since.
func (c *chunkLRU) adoptOld(ks []chunkKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for j := len(ks) - 1; j >= 0; j-- {
		if _, ok := c.at[ks[j]]; !ok {
			c.at[ks[j]] = c.l.PushFront(ks[j])
		}
	}
}

func (c *chunkLRU) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.l.Len()
}

// evictor is a node's eviction state.
type evictor struct {
	lru *chunkLRU
	// pass: one eviction pass at a time (a second waits for the first's
	// result instead of evicting as much again).
	pass    sync.Mutex
	minFree atomic.Int64 // bytes; set at Start from the pool's size

	chunks, bytes, passes, failed atomic.Int64
}

func newEvictor() *evictor { return &evictor{lru: newChunkLRU()} }

// EvictStats are the eviction counters of the status's cluster section.
type EvictStats struct {
	MinFree int64 `json:"min_free"` // the low watermark, bytes
	Chunks  int64 `json:"chunks"`   // chunks evicted since the mount
	Bytes   int64 `json:"bytes"`    // their bytes
	Passes  int64 `json:"passes"`   // eviction passes that evicted something
	Failed  int64 `json:"failed"`   // chunks whose eviction failed (left present)
}

func (e *evictor) stats() EvictStats {
	return EvictStats{MinFree: e.minFree.Load(), Chunks: e.chunks.Load(), Bytes: e.bytes.Load(),
		Passes: e.passes.Load(), Failed: e.failed.Load()}
}

// setMinFree fixes the low watermark for a pool of total bytes.
func (n *Node) setMinFree(total int64) {
	mf := n.cfg.CacheMinFree
	if mf <= 0 {
		pct := n.cfg.CacheMinFreePct
		if pct <= 0 {
			pct = DefaultCacheMinFreePct
		}
		mf = int64(float64(total) * pct / 100)
	}
	n.ev.minFree.Store(mf)
}

// Pin keeps the chunks of [off, off+length) of in in the pool until the
// returned function is called, and counts them read (the LRU order). fs
// calls it around Fill and the pool read that follows: a chunk Fill found
// present is not punched out before the read has the pool's range lock
// (which a punch waits for).
func (n *Node) Pin(in *core.Inode, off, length int64) (unpin func()) {
	if n == nil || length <= 0 || in.IsDir() {
		return func() {}
	}
	f := n.fileOf(in)
	if f == nil {
		return func() {}
	}
	f.mu.Lock()
	cs, size, ver := f.cs, int64(in.Attr().Size), f.ver
	f.mu.Unlock()
	if ver == 0 || cs <= 0 || off >= size {
		return func() {}
	}
	end := min(off+length, size)
	var ks []chunkKey
	for i := off / cs; i <= (end-1)/cs; i++ {
		ks = append(ks, chunkKey{f, namespace.ChunkIdx(i)})
	}
	n.ev.lru.pin(ks)
	return func() { n.ev.lru.unpin(ks) }
}

// used records that chunk i of f was just stored, or served to a peer (f.mu
// held): the most recently used (local reads touch it through Pin).
func (n *Node) used(f *file, i namespace.ChunkIdx) { n.ev.lru.touch(chunkKey{f, i}) }

// roomFor keeps the low watermark before storeInFile stores chunk ref of
// f, unless it will not store it (present already: a fetch stores through
// StoreChunk and then once more; another version). The caller holds the
// pool, not f.mu.
func (n *Node) roomFor(f *file, ref objstore.ChunkRef, size int64) {
	i := namespace.ChunkIdx(ref.Idx)
	f.mu.Lock()
	skip := objstore.Version(f.ver) != ref.Ver || f.removed || f.present.Has(i) || f.changed.Has(i) || f.inflight.Has(i)
	f.mu.Unlock()
	if !skip {
		n.makeRoom(size, nil)
	}
}

// reclaim is the pool's core.Reclaimer: a write (or create, or setxattr)
// that found the pool full gets a chunk's worth of room above the low
// watermark from the cache, if anything may go. Without it a node whose
// pool is full of cached chunks could write only min_free before ENOSPC.
func (n *Node) reclaim() bool {
	release, ok := n.usePool()
	if !ok {
		return false
	}
	defer release()
	before := n.avail()
	n.makeRoom(n.ns.ChunkSize(), nil)
	return n.avail() > before
}

// avail is the pool's space a write may take, in bytes.
func (n *Node) avail() int64 {
	st := n.p.Statfs()
	return int64(st.Avail) * int64(st.BlockSize)
}

// makeRoom evicts the least recently read clean chunks until the pool has
// need bytes free above the low watermark, or nothing more may go. held is
// a file whose mu the caller holds (nil: none); the files of other chunks
// are only tried (TryLock: a busy file is passed over), so a pass never
// waits for a file's lock and cannot deadlock with a fill. The caller
// holds the pool (usePool).
func (n *Node) makeRoom(need int64, held *file) {
	if n.avail()-need >= n.ev.minFree.Load() {
		return
	}
	n.ev.pass.Lock()
	defer n.ev.pass.Unlock()
	files := map[*file]bool{}
	var chunks, bytes int64
	tried := map[chunkKey]bool{}
	adopted := false
	for n.avail()-need < n.ev.minFree.Load() {
		k, ok := n.ev.lru.oldest(tried)
		if !ok {
			if adopted {
				break
			}
			adopted = true
			n.adoptUntracked(held)
			continue
		}
		tried[k] = true
		freed, err := n.evictChunk(k, held)
		if err != nil {
			n.ev.failed.Add(1)
			n.log.Warn("evicting a chunk", zap.String("id", string(k.f.id)), zap.Uint32("chunk", uint32(k.i)), zap.Error(err))
			continue
		}
		if freed > 0 {
			files[k.f] = true
			chunks++
			bytes += freed
		}
	}
	if chunks == 0 {
		if n.avail() < need {
			n.log.Debug("no chunk could be evicted", zap.Int64("need", need), zap.Int64("avail", n.avail()))
		}
		return
	}
	n.ev.chunks.Add(chunks)
	n.ev.bytes.Add(bytes)
	n.ev.passes.Add(1)
	n.log.Info("evicted cluster chunks from the pool", zap.Int("files", len(files)), zap.Int64("chunks", chunks),
		zap.Int64("bytes", bytes), zap.Int64("avail", n.avail()), zap.Int64("min_free", n.ev.minFree.Load()))
}

// evictableLocked: chunk i of g is present, of the committed version, and
// nothing local changes the file (no writer, no dirty chunk, no commit in
// flight): its bytes are in S3.
// Precondition: g.mu is held.
func evictableLocked(g *file, i namespace.ChunkIdx) bool {
	return g.present.Has(i) && g.ver > 0 && !g.removed && !g.dirty && g.writers == 0 &&
		g.changed.Len() == 0 && g.inflight.Len() == 0 && g.cs > 0
}

// evictChunk takes chunk k out of the pool: its present bit goes and the
// state is saved (durable: core's xattr change is a journal commit) before
// the punch, so a crash between leaves "absent" over bytes, never
// "present" over a hole; the holder record shrinks; then the bytes are
// punched out (PUNCH_HOLE|KEEP_SIZE: size and other chunks stay). It
// returns the bytes freed (0: not evicted, busy or no longer evictable).
func (n *Node) evictChunk(k chunkKey, held *file) (int64, error) {
	g := k.f
	if g != held {
		if !g.mu.TryLock() {
			return 0, nil
		}
		defer g.mu.Unlock()
	}
	i := k.i
	if !g.present.Has(i) || g.removed {
		n.ev.lru.remove(k)
		return 0, nil
	}
	// A read pins before Fill looks at present (under g.mu): checked
	// under g.mu, a read either pinned already or finds the chunk absent.
	if !evictableLocked(g, i) || n.ev.lru.pinned(k) {
		return 0, nil
	}
	start := int64(i) * g.cs
	size := min(g.cs, int64(g.in.Attr().Size)-start)
	g.present.Remove(i)
	crc, hadCRC := g.crc[i]
	delete(g.crc, i)
	if err := n.saveLocked(g); err != nil {
		g.present.Add(i)
		if hadCRC {
			g.crc[i] = crc
		}
		return 0, err
	}
	n.ev.lru.remove(k)
	n.ns.RemoveHolding(g.id, g.ver, i)
	if size <= 0 {
		return 0, nil
	}
	if err := n.p.Fallocate(g.in, uint64(start), uint64(size), core.FallocPunchHole|core.FallocKeepSize); err != nil {
		// Absent already: a later read fetches it again over these
		// bytes. Only the space is not given back.
		return 0, err
	}
	// The punch is no change of the file: its mtime stays the committed one.
	mt := time.Unix(0, g.mtime)
	if err := n.p.Setattr(g.in, core.SetAttr{Mtime: &mt}); err != nil {
		n.log.Debug("restoring the mtime after an eviction", zap.Error(err))
	}
	return size, nil
}

// adoptUntracked orders the present chunks the LRU does not know (filled
// before a restart, or written on this node) before the others: by their
// file's access time, then by index.
func (n *Node) adoptUntracked(held *file) {
	n.mu.Lock()
	fs := make([]*file, 0, len(n.files))
	for _, f := range n.files {
		fs = append(fs, f)
	}
	n.mu.Unlock()
	type cand struct {
		k  chunkKey
		at int64
	}
	var cs []cand
	for _, f := range fs {
		if f != held {
			if !f.mu.TryLock() {
				continue
			}
		}
		if f.ver > 0 && !f.removed && f.present.Len() > 0 {
			at := f.in.Attr().Atime.UnixNano()
			for _, i := range f.present.Slice() {
				cs = append(cs, cand{chunkKey{f, i}, at})
			}
		}
		if f != held {
			f.mu.Unlock()
		}
	}
	sort.Slice(cs, func(a, b int) bool {
		if cs[a].at != cs[b].at {
			return cs[a].at < cs[b].at
		}
		return cs[a].k.i < cs[b].k.i
	})
	ks := make([]chunkKey, len(cs))
	for j, c := range cs {
		ks[j] = c.k
	}
	n.ev.lru.adoptOld(ks)
}

// writeChunk writes a fetched chunk's bytes into f (the chunk is marked
// storing, f.mu is not held, so a pass may take f's other chunks too): on
// ENOSPC it evicts and tries once more; a write that still fails gives back
// what it wrote (the chunk stays absent).
func (n *Node) writeChunk(f *file, off int64, data []byte) (int, error) {
	k, err := n.p.Write(f.in, off, data, false)
	if errors.Is(err, core.ErrNoSpace) {
		n.makeRoom(int64(len(data)), nil)
		k, err = n.p.Write(f.in, off, data, false)
	}
	if err != nil && k > 0 {
		if perr := n.p.Fallocate(f.in, uint64(off), uint64(k), core.FallocPunchHole|core.FallocKeepSize); perr != nil {
			n.log.Debug("giving back a failed chunk write", zap.Error(perr))
		}
	}
	return k, err
}

// AllData reports that in is a committed cluster file, whose chunks not in
// the pool (never filled, or evicted) are holes of the pool file but data
// of the file: fs answers SEEK_DATA and SEEK_HOLE as for a file without
// holes, so that a copy that skips holes (cp) reads them through Fill.
func (n *Node) AllData(in *core.Inode) bool {
	if n == nil || in.IsDir() {
		return false
	}
	f := n.fileOf(in)
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ver > 0
}
