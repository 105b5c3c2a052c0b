package recovery

import (
	"fmt"
	"sort"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

// SSD tier (FORMAT.md "SSD tier: registry, device label, table
// descriptor"): the registry block the superblock names, and each
// embedding table's descriptor (header and translation table). The rows
// themselves live on the SSD devices, which the checker does not read.

const registryName = "SSD-tier registry"

// tableSlot is the first byte of an inode's session area that belongs to
// the table field: the session fields and their reserved bytes end there.
const tableSlot = format.INTable - format.INSession

// sessionArea is the part of the inode's reserved area that holds the
// segmented-I/O session (everything but the table field).
func sessionArea(d *format.Inode) []byte { return d.Session[:tableSlot] }

// checkTier decodes the registry and claims its block, after the extents:
// a registry that shares a block with a file gives way (a bad pointer in
// the superblock costs the registry, never another file's data).
func (a *analysis) checkTier() {
	t := a.sb.Tier
	if t == 0 {
		return
	}
	var why string
	var devs []format.TierDevice
	var err error
	if !a.sb.ValidData(t, 1) {
		why = fmt.Sprintf("block %d lies outside the data region", t)
	} else if devs, err = format.DecodeTier(a.v.read(t.Off(), format.BlockSize)); err != nil {
		why = fmt.Sprintf("block %d: %s", t, errText(err, "tier registry: "))
	} else {
		why = a.tryClaim(0, []claim{{0, t, 1, "SSD-tier registry block"}})
	}
	if why == "" {
		a.tierDevs = len(devs)
		a.rep.TierDevices = len(devs)
		return
	}
	a.tierBad = true
	p := Problem{Structure: registryName, Blk: t, What: why +
		"; Repair drops the registry (zeroes the superblock's pointer to it) and clears every embedding table, whose rows on the SSD tier are lost",
		Repairable: true}
	if a.sb.ValidData(t, 1) {
		p.Off = t.Off()
	}
	a.problem(p)
	sb := a.sb
	a.fixes = append(a.fixes, &fix{phase: phaseTier, what: "drop the SSD-tier registry", direct: func(m pmem.Medium) ([]string, error) {
		// The superblocks lie outside what a transaction may target: store
		// directly, primary then replica, as the mount code does. A crash
		// between the two leaves two valid copies; the primary is read.
		sb.Tier = 0
		b := m.Bytes()
		for _, blk := range []format.Blk{format.SuperPrimary, format.SuperReplica} {
			sb.Encode(b[blk.Off():])
			if err := m.Persist(int64(blk.Off()), format.SuperSize); err != nil {
				return nil, fmt.Errorf("superblock at block %d: %w", blk, err)
			}
		}
		return []string{fmt.Sprintf("superblock: dropped the SSD-tier registry (%s); the embedding tables lose their devices", why)}, nil
	}})
}

// table is a table inode whose descriptor decodes.
type table struct {
	in     *inode
	blk    format.Blk
	hdr    format.TableHeader
	copies []shardCopy
}

// shardCopy is one copy of a shard on a device: bytes [start, end) of the
// device's backing file.
type shardCopy struct {
	t          *table
	dev        format.DevID
	start, end uint64
	shard      int
	replica    bool
}

func (c shardCopy) String() string {
	kind := "primary"
	if c.replica {
		kind = "replica"
	}
	return fmt.Sprintf("shard %d's %s copy (device %d, bytes %d..%d)", c.shard, kind, c.dev, c.start, c.end-1)
}

func sortCopies(cs []shardCopy) {
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].dev != cs[j].dev {
			return cs[i].dev < cs[j].dev
		}
		if cs[i].start != cs[j].start {
			return cs[i].start < cs[j].start
		}
		return cs[i].t.in.ino < cs[j].t.in.ino
	})
}

// checkTables validates every table inode (and that no other inode names a
// descriptor), claims the descriptors, and checks that no two shard copies
// share bytes of a device, across all tables. The lowest-numbered table
// keeps contested space; a table that cannot be trusted is cleared.
func (a *analysis) checkTables() {
	var tabs []*table
	for _, in := range a.order {
		d := &in.d
		if d.Flags&format.InodeTable == 0 {
			if blk := d.TableBlk(); blk != 0 {
				a.inodeProblem(in, fmt.Sprintf("names a table descriptor at block %d but is not an embedding table (flag bit 1 is clear); Repair clears the field", blk))
				d.SetTableBlk(0)
				a.rewrite(in, fmt.Sprintf("cleared the table descriptor field (block %d) of a file that is not an embedding table", blk))
			}
			continue
		}
		t, why := a.loadTable(in)
		if why == "" {
			why = a.tryClaim(in.ino, []claim{{in.ino, t.blk, uint64(t.hdr.Blocks), "table descriptor"}})
		}
		if why != "" {
			a.clearTable(in, why)
			continue
		}
		tabs = append(tabs, t)
	}
	for _, t := range a.resolveOverlaps(tabs) {
		d := &t.in.d
		if want := t.hdr.Size(); d.Size != want {
			a.inodeProblem(t.in, fmt.Sprintf("embedding table size %d, but its descriptor says %d rows of %d bytes (%d); Repair sets the size", d.Size, t.hdr.Rows, t.hdr.RowBytes(), want))
			old := d.Size
			d.Size = want
			a.rewrite(t.in, fmt.Sprintf("embedding table size %d -> %d", old, want))
		}
		a.rep.Tables++
	}
}

// loadTable decodes a table inode's descriptor and shard entries. It
// claims nothing.
func (a *analysis) loadTable(in *inode) (*table, string) {
	d := &in.d
	blk := d.TableBlk()
	switch {
	case !d.IsReg():
		return nil, fmt.Sprintf("a %s cannot be an embedding table", in.kind())
	case len(in.exts) > 0:
		return nil, fmt.Sprintf("maps pool blocks (%d extents), but an embedding table keeps its rows on the SSD tier", len(in.exts))
	case !a.sb.ValidData(blk, 1):
		return nil, fmt.Sprintf("table descriptor at block %d lies outside the data region", blk)
	}
	hdr, err := format.DecodeTableHeader(a.v.read(blk.Off(), format.TBHeader))
	if err != nil {
		return nil, fmt.Sprintf("table descriptor at block %d: %s", blk, errText(err, "table descriptor: "))
	}
	if !a.sb.ValidData(blk, uint64(hdr.Blocks)) {
		return nil, fmt.Sprintf("table descriptor at block %d (%d blocks) runs past the data region", blk, hdr.Blocks)
	}
	t := &table{in: in, blk: blk, hdr: hdr}
	desc := a.v.read(blk.Off(), int(hdr.Blocks)*format.BlockSize)
	for i := 0; i < int(hdr.Shards); i++ {
		e, err := format.DecodeShardEntry(desc[format.TBHeader+i*format.ShardEntrySize:], a.tierDevs)
		if err != nil {
			why := fmt.Sprintf("table descriptor at block %d: shard %d: %s", blk, i, errText(err, "shard entry: "))
			switch {
			case a.tierBad:
				why += " (the SSD-tier registry is damaged)"
			case a.sb.Tier == 0:
				why += " (the pool has no SSD-tier registry)"
			}
			return nil, why
		}
		span := hdr.ShardSpan(i)
		t.copies = append(t.copies, shardCopy{t: t, dev: e.Dev, start: e.Off, end: e.Off + span, shard: i})
		if e.RDev != 0 {
			t.copies = append(t.copies, shardCopy{t: t, dev: e.RDev, start: e.ROff, end: e.ROff + span, shard: i, replica: true})
		}
	}
	// Its own copies must not overlap: sorted by start, a copy overlaps an
	// earlier one iff it starts before the furthest end so far.
	sortCopies(t.copies)
	var prev *shardCopy
	for i := range t.copies {
		c := &t.copies[i]
		if prev != nil && prev.dev == c.dev && c.start < prev.end {
			return nil, fmt.Sprintf("table descriptor at block %d: %s overlaps its own %s", blk, *c, *prev)
		}
		if prev == nil || prev.dev != c.dev || c.end > prev.end {
			prev = c
		}
	}
	return t, ""
}

// resolveOverlaps finds shard copies of different tables that share bytes
// of a device and clears, of each such pair, the higher-numbered table
// unless the lower one is cleared itself. It returns the tables kept.
func (a *analysis) resolveOverlaps(tabs []*table) []*table {
	var all []shardCopy
	for _, t := range tabs {
		all = append(all, t.copies...)
	}
	sortCopies(all)
	type pair struct{ lo, hi format.Ino }
	first := map[pair]string{}        // one example per pair of tables
	partners := map[*table][]*table{} // lower-numbered tables it overlaps
	var active []shardCopy            // copies on this device ending after the current start
	for i, c := range all {
		if i > 0 && all[i-1].dev != c.dev {
			active = active[:0]
		}
		kept := active[:0]
		for _, o := range active {
			if o.end > c.start {
				kept = append(kept, o)
			}
		}
		active = kept
		for _, o := range active {
			if o.t == c.t {
				continue // a table's own copies are disjoint (loadTable)
			}
			lo, hi := o, c
			if lo.t.in.ino > hi.t.in.ino {
				lo, hi = hi, lo
			}
			k := pair{lo.t.in.ino, hi.t.in.ino}
			if _, seen := first[k]; !seen {
				first[k] = fmt.Sprintf("%s overlaps inode %d's %s", hi, lo.t.in.ino, lo)
				partners[hi.t] = append(partners[hi.t], lo.t)
			}
		}
		active = append(active, c)
	}
	var kept []*table
	cleared := map[*table]bool{}
	for _, t := range tabs { // by inode number
		for _, lo := range partners[t] {
			if !cleared[lo] {
				cleared[t] = true
				a.unclaim(t.in.ino, "table descriptor")
				a.clearTable(t.in, fmt.Sprintf("table descriptor at block %d: %s", t.blk, first[pair{lo.in.ino, t.in.ino}]))
				break
			}
		}
		if !cleared[t] {
			kept = append(kept, t)
		}
	}
	return kept
}

// unclaim gives back the blocks of ino's claims named what.
func (a *analysis) unclaim(ino format.Ino, what string) {
	kept := a.claims[:0]
	for _, c := range a.claims {
		if c.ino == ino && c.what == what {
			a.used.Release(c.phys, c.n)
			continue
		}
		kept = append(kept, c)
	}
	a.claims = kept
}

// clearTable makes a table inode an ordinary regular file: flag and
// descriptor field cleared, size 0 (the descriptor blocks, unclaimed, are
// free). The rows on the SSD tier are lost.
func (a *analysis) clearTable(in *inode, why string) {
	d := &in.d
	var what, line string
	switch {
	case !d.IsReg():
		what = why + " (the embedding-table flag is set); Repair clears the flag"
		line = "cleared the embedding-table flag of a " + in.kind()
	case len(in.exts) > 0:
		what = "embedding table " + why + "; Repair clears the table flag: the file keeps its blocks, the table's rows on the SSD tier are lost"
		line = "cleared the embedding table (" + why + "); the file keeps its blocks, the table's rows on the SSD tier are lost"
	default:
		what = "embedding table: " + why + "; Repair clears the table (it becomes an empty regular file): its rows on the SSD tier are lost"
		line = "cleared the embedding table (" + why + "): now an empty regular file, its rows on the SSD tier are lost"
		d.Size = 0
	}
	d.Flags &^= format.InodeTable
	d.SetTableBlk(0)
	a.inodeProblem(in, what)
	a.rewrite(in, line)
}
