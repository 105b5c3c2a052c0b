package embedding

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// location is one version of a shard's translation entry. Readers pin it
// (refs) for the life of their pieces; a move publishes a new location and
// frees the old space only once the old one's pins are gone.
type location struct {
	e    format.ShardEntry
	refs atomic.Int64
}

type shard struct {
	cur    atomic.Pointer[location]
	wgate  sync.RWMutex  // writers shared; a move of this shard exclusive
	heat   atomic.Uint64 // bytes read since the migrator's last look
	moving atomic.Bool   // a move or replica change is under way
}

// Table is the DRAM state of one embedding table.
type Table struct {
	tier     *Tier
	in       *core.Inode
	hdr      format.TableHeader
	rowBytes int64
	shards   []shard
}

// ShardInfo describes one shard's current locations (user.dnnfs.shards).
type ShardInfo struct {
	Shard      int    `json:"shard"`
	FirstRow   uint64 `json:"first_row"`
	EndRow     uint64 `json:"end_row"` // exclusive
	Dev        uint16 `json:"device"`
	Off        uint64 `json:"offset"`
	ReplicaDev uint16 `json:"replica_device,omitempty"`
	ReplicaOff uint64 `json:"replica_offset,omitempty"`
	Gen        uint32 `json:"generation"`
	Moving     bool   `json:"moving,omitempty"`
}

// Shards lists the translation table as readers currently see it.
func (t *Table) Shards() []ShardInfo {
	out := make([]ShardInfo, len(t.shards))
	for i := range t.shards {
		e := t.shards[i].cur.Load().e
		a, b := t.hdr.ShardRange(i)
		out[i] = ShardInfo{Shard: i, FirstRow: a, EndRow: b, Dev: uint16(e.Dev), Off: e.Off,
			ReplicaDev: uint16(e.RDev), ReplicaOff: e.ROff, Gen: e.Gen, Moving: t.shards[i].moving.Load()}
	}
	return out
}

// Header returns the table's shape.
func (t *Table) Header() format.TableHeader { return t.hdr }

// pin returns shard i's current location, pinned.
func (t *Table) pin(i int) *location {
	sh := &t.shards[i]
	for {
		l := sh.cur.Load()
		l.refs.Add(1)
		if sh.cur.Load() == l {
			return l
		}
		l.refs.Add(-1)
	}
}

// readCopy picks the copy of a pinned location to read: the device with
// the shorter queue when the shard is replicated.
func (t *Table) readCopy(l *location) (*Device, int64) {
	d := t.tier.dev(l.e.Dev)
	if l.e.RDev != 0 {
		if r := t.tier.dev(l.e.RDev); r != nil && (d == nil || r.queueLen() < d.queueLen()) {
			return r, int64(l.e.ROff)
		}
	}
	return d, int64(l.e.Off)
}

// shardOf returns the shard of table byte offset off and that shard's
// first byte.
func (t *Table) shardOf(off int64) (int, int64) {
	i := int(uint64(off) / uint64(t.rowBytes) / t.hdr.ShardRows)
	return i, int64(uint64(i) * t.hdr.ShardRows * uint64(t.rowBytes))
}

// span is a byte range of one shard copy.
type span struct {
	shard  int
	tabOff int64 // table byte offset of the range
	n      int
}

// spans cuts [off, off+n) at shard boundaries.
func (t *Table) spans(off int64, n int) []span {
	var out []span
	for n > 0 {
		i, base := t.shardOf(off)
		shardBytes := int64(t.hdr.ShardRows) * t.rowBytes
		k := int(min(int64(n), base+shardBytes-off))
		out = append(out, span{shard: i, tabOff: off, n: k})
		off += int64(k)
		n -= k
	}
	return out
}

// ReadAt reads table bytes [off, off+len(p)) through the scheduler (one
// request, pieces per device) and waits for them.
func (t *Table) ReadAt(p []byte, off int64) (int, error) {
	size := int64(t.hdr.Size())
	if off >= size || len(p) == 0 {
		return 0, nil
	}
	n := int(min(int64(len(p)), size-off))
	p = p[:n]
	rows := int((int64(n) + t.rowBytes - 1) / t.rowBytes)
	var pieces []*piece
	var pins []*location
	maxPiece := int64(t.tier.sched.cfg.MaxPiece)
	for _, s := range t.spans(off, n) {
		l := t.pin(s.shard)
		pins = append(pins, l)
		t.shards[s.shard].heat.Add(uint64(s.n))
		d, devBase := t.readCopy(l)
		_, base := t.shardOf(s.tabOff)
		devOff := devBase + (s.tabOff - base)
		// Read the sector-aligned cover (O_DIRECT) in pieces of at most
		// MaxPiece; each copies its overlap out.
		if d == nil {
			for _, l := range pins {
				l.refs.Add(-1)
			}
			return 0, fmt.Errorf("shard %d: %w", s.shard, ErrNoTier)
		}
		sec := d.sector
		a := devOff / sec * sec
		b := (devOff + int64(s.n) + sec - 1) / sec * sec
		for pa := a; pa < b; pa += maxPiece {
			pb := min(b, pa+maxPiece)
			lo, hi := max(pa, devOff), min(pb, devOff+int64(s.n))
			dst := p[s.tabOff-off+(lo-devOff) : s.tabOff-off+(hi-devOff)]
			pc := &piece{dev: d, off: pa, size: int(pb - pa)}
			pc.after = func() { copy(dst, pc.buf[lo-pa:hi-pa]) }
			pieces = append(pieces, pc)
		}
	}
	buf := carve(pieces)
	t.tier.useful.Add(uint64(n))
	err := t.tier.run(rows, n, pieces)
	buf.put() // every piece is done: run returned
	for _, l := range pins {
		l.refs.Add(-1)
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// WriteAt writes table bytes through the loaders, to every copy of each
// shard touched, and waits.
func (t *Table) WriteAt(p []byte, off int64) (int, error) {
	size := int64(t.hdr.Size())
	if off >= size {
		return 0, ErrPastEnd
	}
	n := int(min(int64(len(p)), size-off))
	p = p[:n]
	rows := int((int64(n) + t.rowBytes - 1) / t.rowBytes)
	var pieces []*piece
	held := map[int]bool{}
	maxPiece := t.tier.sched.cfg.MaxPiece
	for _, s := range t.spans(off, n) {
		if !held[s.shard] {
			t.shards[s.shard].wgate.RLock()
			held[s.shard] = true
		}
		// Under the write gate no move happens: the current location is
		// stable until the gate is released.
		l := t.shards[s.shard].cur.Load()
		_, base := t.shardOf(s.tabOff)
		src := p[s.tabOff-off : s.tabOff-off+int64(s.n)]
		copies := []struct {
			id  format.DevID
			off uint64
		}{{l.e.Dev, l.e.Off}, {l.e.RDev, l.e.ROff}}
		for _, c := range copies {
			if c.id == 0 {
				continue
			}
			d := t.tier.dev(c.id)
			devOff := int64(c.off) + (s.tabOff - base)
			for k := 0; k < len(src); k += maxPiece {
				chunk := src[k:min(len(src), k+maxPiece)]
				if (devOff+int64(k))%d.sector == 0 && int64(len(chunk))%d.sector == 0 {
					ab := alignedBuf(len(chunk))
					copy(ab, chunk)
					chunk = ab
				}
				pieces = append(pieces, &piece{dev: d, off: devOff + int64(k), buf: chunk, write: true})
			}
		}
	}
	err := t.tier.run(rows, n, pieces)
	for i := range held {
		t.shards[i].wgate.RUnlock()
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}
