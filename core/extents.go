package core

import (
	"cmp"
	"slices"
	"sort"

	"github.com/dnnfs/dnnfs/format"
)

// Extent arithmetic on sorted lists (format.Extent, by Logical).

// lookupLocked maps file block fb: ok with the pool block and how many
// blocks are contiguous from there, or !ok with the hole's length (0 =
// no extent after fb).
func (in *Inode) lookupLocked(fb uint64) (phys Blk, n uint64, ok bool) {
	return format.MapBlock(in.exts, fb)
}

// mergeExtents returns exts with add (which must not overlap exts)
// inserted, adjacent extents merged.
func mergeExtents(exts, add []format.Extent) []format.Extent {
	out := make([]format.Extent, 0, len(exts)+len(add))
	out = append(out, exts...)
	out = append(out, add...)
	slices.SortFunc(out, func(a, b format.Extent) int { return cmp.Compare(a.Logical, b.Logical) })
	merged := out[:0]
	for _, e := range out {
		merged = appendMerged(merged, e)
	}
	return merged
}

// appendMerged appends e to a sorted list, merged into the last extent
// when it continues it (file and pool blocks, same unwritten state).
func appendMerged(exts []format.Extent, e format.Extent) []format.Extent {
	if n := len(exts); n > 0 {
		p := &exts[n-1]
		if p.End() == e.Logical && p.Phys+Blk(p.Len) == e.Phys && p.Unwritten == e.Unwritten {
			p.Len += e.Len
			return exts
		}
	}
	return append(exts, e)
}

// cutExtents removes file blocks [from, to) from exts: kept is the new
// list, removed the pool blocks no longer mapped.
func cutExtents(exts []format.Extent, from, to uint64) (kept, removed []format.Extent) {
	for _, e := range exts {
		if e.End() <= from || e.Logical >= to {
			kept = append(kept, e)
			continue
		}
		if e.Logical < from {
			kept = append(kept, format.Extent{Logical: e.Logical, Phys: e.Phys, Len: from - e.Logical, Unwritten: e.Unwritten})
		}
		lo, hi := max(e.Logical, from), min(e.End(), to)
		removed = append(removed, format.Extent{Logical: lo, Phys: e.Phys + Blk(lo-e.Logical), Len: hi - lo})
		if e.End() > to {
			kept = append(kept, format.Extent{Logical: to, Phys: e.Phys + Blk(to-e.Logical), Len: e.End() - to, Unwritten: e.Unwritten})
		}
	}
	return kept, removed
}

// writtenExtents returns exts with file blocks [from, to) no longer
// unwritten (a write reached them), merged with their neighbours. It
// runs on every write into fallocated blocks, so it builds the new list
// in one pass and one allocation.
func writtenExtents(exts []format.Extent, from, to uint64) []format.Extent {
	out := make([]format.Extent, 0, len(exts)+2)
	for _, e := range exts {
		if !e.Unwritten || e.End() <= from || e.Logical >= to {
			out = appendMerged(out, e)
			continue
		}
		lo, hi := max(e.Logical, from), min(e.End(), to)
		if e.Logical < lo {
			out = appendMerged(out, format.Extent{Logical: e.Logical, Phys: e.Phys, Len: lo - e.Logical, Unwritten: true})
		}
		out = appendMerged(out, format.Extent{Logical: lo, Phys: e.Phys + Blk(lo-e.Logical), Len: hi - lo})
		if e.End() > hi {
			out = appendMerged(out, format.Extent{Logical: hi, Phys: e.Phys + Blk(hi-e.Logical), Len: e.End() - hi, Unwritten: true})
		}
	}
	return out
}

// unwrittenLocked reports whether any of file blocks [from, to) is in an
// unwritten extent.
func (in *Inode) unwrittenLocked(from, to uint64) bool {
	exts := in.exts
	for i := sort.Search(len(exts), func(i int) bool { return exts[i].End() > from }); i < len(exts) && exts[i].Logical < to; i++ {
		if exts[i].Unwritten {
			return true
		}
	}
	return false
}

// holesLocked lists the unmapped file-block ranges within [from, to).
func (in *Inode) holesLocked(from, to uint64) []format.Extent {
	var holes []format.Extent
	for fb := from; fb < to; {
		_, n, ok := in.lookupLocked(fb)
		if n == 0 || fb+n > to {
			n = to - fb
		}
		if !ok {
			holes = append(holes, format.Extent{Logical: fb, Len: n})
		}
		fb += n
	}
	return holes
}

// goalLocked is the pool block where file block fb would best go: right
// after the physical block of the nearest mapped block before it.
func (in *Inode) goalLocked(fb uint64) Blk {
	exts := in.exts
	i := sort.Search(len(exts), func(i int) bool { return exts[i].Logical >= fb })
	if i > 0 {
		e := exts[i-1]
		return e.Phys + Blk(fb-e.Logical)
	}
	if i < len(exts) && exts[i].Phys > Blk(exts[i].Logical-fb) {
		return exts[i].Phys - Blk(exts[i].Logical-fb)
	}
	return 0
}
