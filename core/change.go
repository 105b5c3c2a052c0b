package core

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/pmem"
)

// change is a journal transaction plus its DRAM side effects: staged
// structures become visible in DRAM only after the commit (core/doc.go),
// and an abort gives back what staging took.
type change struct {
	fs        *FS
	tx        *journal.Tx
	allocated []format.Extent // returned to the allocator if the change aborts
	freed     []format.Extent // returned to the allocator after commit
	after     []func()        // DRAM updates, applied after commit
	undo      []func()        // DRAM updates made while staging, reverted (last first) on abort
	// freeing: the change gives space back (truncate, punch hole) and may
	// take blocks of the metadata reserve for it (DESIGN.md §Metadata
	// reserve): splitting an extent on a full pool needs an overflow block.
	freeing bool
	// absorbed: inodes whose delayed size and extents this change
	// commits (their data was flushed first).
	absorbed []*Inode
	// err: a staging step that cannot return an error failed (putInode's
	// absorption); commit fails with it.
	err error
}

func (fs *FS) begin() *change { return &change{fs: fs, tx: fs.j.Begin()} }

// commit makes the change durable and applies its DRAM side effects.
// A failed commit applies none of them.
func (c *change) commit() error {
	if c.err != nil {
		c.abort()
		return c.err
	}
	if err := c.tx.Commit(); err != nil {
		c.abort()
		if errors.Is(err, journal.ErrTooLarge) {
			return fmt.Errorf("%w: %v", ErrTooBig, err)
		}
		return ioErr("journal commit", err)
	}
	for _, f := range c.after {
		f()
	}
	c.fs.releaseFreed(c.freed)
	return nil
}

func (c *change) abort() {
	for i := len(c.undo) - 1; i >= 0; i-- {
		c.undo[i]()
	}
	c.undo = nil
	for _, e := range c.allocated {
		c.fs.alloc.Release(e.Phys, e.Len)
	}
	c.allocated = nil
}

// releaseBlocks returns blocks to the allocator, punching them out of an
// emulated pool file so their memory or disk space is given back (DAX
// media clear them). DRAM media gain nothing from clearing blocks nobody
// reads. An emulated pool may keep them warm instead (releaseFreed).
// The punch is best effort: the blocks are free either way, and
// whoever takes them next overwrites or clears them.
func (fs *FS) releaseBlocks(b Blk, n uint64) {
	if fs.m.Kind() != pmem.Memory {
		_ = fs.m.Punch(int64(b.Off()), int64(n*format.BlockSize))
	}
	fs.alloc.Release(b, n)
}

// allocBlocks allocates n blocks near goal, recorded in the change so an
// abort returns them. Their content is undefined.
func (c *change) allocBlocks(goal Blk, n uint64) ([]format.Extent, error) {
	if !c.mayTake(n) {
		return nil, ErrNoSpace
	}
	runs := c.fs.alloc.AllocRuns(goal, n)
	if runs == nil {
		return nil, ErrNoSpace
	}
	c.allocated = append(c.allocated, runs...)
	return runs, nil
}

// fillHolesLocked allocates pool blocks for the given holes of in (near
// their neighbours) and returns them as extents; zero makes them read as
// zeros (fallocate, sessions), otherwise the caller overwrites them.
// unwritten marks them so (fallocate: zeros that are not data).
// Precondition: in.mu is held.
func (c *change) fillHolesLocked(in *Inode, holes []format.Extent, zero, unwritten bool) ([]format.Extent, error) {
	var added []format.Extent
	for _, h := range holes {
		runs, err := c.allocBlocks(in.goalLocked(h.Logical), h.Len)
		if err != nil {
			return nil, err
		}
		lg := h.Logical
		for _, r := range runs {
			if zero {
				if err := zeroRange(c.fs.m, int64(r.Phys.Off()), int64(r.Len*bs)); err != nil {
					return nil, ioErr("clearing new blocks", err)
				}
				// Back them in the pool file too (emulated pools), as
				// fallocate promises: a later write into them then finds
				// its space there, and is as fast as an overwrite.
				if err := c.fs.materialize(r.Phys, r.Len); err != nil {
					return nil, err
				}
			}
			added = append(added, format.Extent{Logical: lg, Phys: r.Phys, Len: r.Len, Unwritten: unwritten})
			lg += r.Len
		}
	}
	return added, nil
}

// mayTake reports whether the change may take n more blocks: a change
// that frees space may use the whole pool, any other must leave the
// metadata reserve free. The check and the allocation are not one atomic
// step, so concurrent allocations may dip into the reserve by what they
// take at once; the reserve is there for that.
func (c *change) mayTake(n uint64) bool {
	return c.freeing || c.fs.alloc.Free() >= n+c.fs.reserve
}

// allocMeta allocates one run of n blocks for metadata that will be stored
// through the mapping (directory, overflow, xattr, symlink blocks).
func (c *change) allocMeta(goal Blk, n uint64) (Blk, error) {
	if !c.mayTake(n) {
		return 0, ErrNoSpace
	}
	b, ok := c.fs.alloc.AllocContig(goal, n)
	if !ok {
		return 0, ErrNoSpace
	}
	c.allocated = append(c.allocated, format.Extent{Phys: b, Len: n})
	if err := c.fs.materialize(b, n); err != nil {
		return 0, err
	}
	return b, nil
}

// putInode stages inode d for in and installs it in DRAM after commit.
// An inode with delayed writes (metaDirty) has them committed with it,
// data first (ordered, DESIGN.md §Delayed commit); an unlinked one keeps
// its size on media instead: a crash frees it anyway. The caller holds
// in.mu.
func (c *change) putInode(in *Inode, d format.Inode) {
	slot := d
	if in.metaDirty && !slices.Contains(c.absorbed, in) {
		if d.Nlink == 0 {
			slot.Size = in.mediaSize
		} else if err := c.absorbExtentsLocked(in, &d); err != nil {
			if c.err == nil {
				c.err = err
			}
			return
		} else {
			slot = d
		}
	}
	var buf [format.InodeSize]byte
	slot.Encode(buf[:])
	c.tx.Write(c.fs.sb.InodeOff(in.Ino), buf[:])
	c.after = append(c.after, func() { in.d = d; in.timesDirty = false })
}

// absorbExtentsLocked stages in's current extent list into d. The blocks
// it may need for the list are metadata: the reserve is there for them
// (DESIGN.md §Metadata reserve).
// Precondition: in.mu is held.
func (c *change) absorbExtentsLocked(in *Inode, d *format.Inode) error {
	saved := c.freeing
	c.freeing = true
	defer func() { c.freeing = saved }()
	return c.putExtentsLocked(in, d, in.exts)
}

// absorbLocked makes the change commit in's delayed size and extents:
// the data written since the last commit is flushed first, so the
// transaction never maps blocks whose bytes are not durable (README,
// Durability contract, rule 5). It fails when that data failed to
// persist and is still part of exts, the list being committed.
// Precondition: in.mu is held.
func (c *change) absorbLocked(in *Inode, exts []format.Extent) error {
	if !in.metaDirty || slices.Contains(c.absorbed, in) {
		return nil
	}
	if lost := in.flushDataLocked(); len(lost) > 0 {
		c.fs.logLostLocked(lost)
	}
	if err := in.freshLostLocked(exts); err != nil {
		return err
	}
	c.absorbed = append(c.absorbed, in)
	c.after = append(c.after, in.clearPendingLocked)
	return nil
}

// clearPendingLocked forgets in's delayed state once a commit made it
// durable (or freed the inode).
func (in *Inode) clearPendingLocked() {
	in.metaDirty, in.fresh, in.freshAll = false, nil, false
	in.fs.pmu.Lock()
	delete(in.fs.pending, in)
	in.fs.pmu.Unlock()
}

// freshLostLocked is ErrIO if a block written since the last commit failed
// to persist, was not rewritten since, and is mapped by exts.
func (in *Inode) freshLostLocked(exts []format.Extent) error {
	for _, l := range in.lost {
		for _, e := range exts {
			lo, hi := max(l.Phys, e.Phys), min(l.Phys+Blk(l.Len), e.Phys+Blk(e.Len))
			if lo >= hi {
				continue
			}
			fresh := in.freshAll
			for _, f := range in.fresh {
				fresh = fresh || (f.Phys < hi && lo < f.Phys+Blk(f.Len))
			}
			if fresh {
				return fmt.Errorf("%w: inode %d: data written at file byte %d failed to persist; its blocks are not mapped on media until it is rewritten",
					ErrIO, in.Ino, int64(e.Logical+uint64(lo-e.Phys))*format.BlockSize)
			}
		}
	}
	return nil
}

// noteFreshLocked records pool blocks [b, b+n) as written by a delayed
// write: not mapped on media until the next commit of the inode.
func (in *Inode) noteFreshLocked(b Blk, n uint64) {
	if in.freshAll {
		return
	}
	if k := len(in.fresh); k > 0 && in.fresh[k-1].Phys+Blk(in.fresh[k-1].Len) == b {
		in.fresh[k-1].Len += n
		return
	}
	if len(in.fresh) >= 4096 {
		in.fresh, in.freshAll = nil, true
		return
	}
	in.fresh = append(in.fresh, format.Extent{Phys: b, Len: n})
}

// notePendingLocked marks in's size or extents as ahead of media and
// hands it to the committer (DESIGN.md §Delayed commit).
func (in *Inode) notePendingLocked() {
	if in.metaDirty {
		return
	}
	in.metaDirty, in.mediaSize = true, in.d.Size
	in.fs.addPending(in)
}

// putExtentsLocked stages a new extent list for in into d (inline part)
// and overflow blocks (format.EncodeExtents), writing only overflow
// blocks whose bytes change.
// Precondition: in.mu is held.
func (c *change) putExtentsLocked(in *Inode, d *format.Inode, exts []format.Extent) error {
	if err := c.absorbLocked(in, exts); err != nil {
		return err
	}
	fs := c.fs
	need := format.OverflowBlocks(len(exts))
	ovf := slices.Clone(in.ovf)
	if need > len(ovf) {
		goal := fs.sb.DataStart
		if len(ovf) > 0 {
			goal = ovf[len(ovf)-1] + 1
		}
		for len(ovf) < need {
			b, err := c.allocMeta(goal, 1)
			if err != nil {
				return err
			}
			ovf = append(ovf, b)
		}
	}
	for _, b := range ovf[need:] {
		c.freed = append(c.freed, format.Extent{Phys: b, Len: 1})
	}
	ovf = ovf[:need]
	media := fs.m.Bytes()
	format.EncodeExtents(d, exts, ovf, func(b Blk, block []byte) {
		off := b.Off()
		if !bytes.Equal(media[off:off+format.BlockSize], block) {
			c.tx.Write(off, block)
		}
	})
	exts = slices.Clone(exts)
	c.after = append(c.after, func() { in.exts = exts; in.ovf = ovf })
	return nil
}
