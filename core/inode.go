package core

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/lock"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// MaxFileSize bounds file sizes: the kernel's MAX_LFS_FILESIZE (2^63-1),
// as on its local file systems. Extents past its last block do not decode
// (format.MaxFileBlocks); block arithmetic stays within a uint64.
const MaxFileSize = format.MaxFileSize

// Inode is the DRAM state of one live inode.
type Inode struct {
	fs   *FS
	Ino  Ino
	typ  uint32 // file type bits; never change, so read without a lock
	refs int    // load time only: directory entries naming the inode

	locks lock.File                  // data range locks; DESIGN.md §Lock order
	sess  atomic.Pointer[session]    // open segmented-I/O session, or nil
	table atomic.Pointer[tableState] // embedding table (set once at creation), or nil
	mu    sync.Mutex

	d           format.Inode    // persistent fields as last committed; times, and the size while metaDirty, may run ahead
	exts        []format.Extent // sorted by Logical, non-overlapping
	ovf         []Blk           // extent overflow chain on media, in order
	xattrs      []format.Xattr  // decoded xattr region
	xattrBlocks uint64          // length of the xattr region
	dir         *dirIndex       // directories only
	parent      Ino             // directories only: the one directory that names it
	opens       int             // open handles (FUSE opens)
	krefs       int             // kernel references: FUSE node IDs the kernel holds for this inode (see KernelRef)
	dirty       []format.Extent // pool block ranges written since the last fsync (Phys, Len)
	allDirty    bool            // too many ranges: flush every extent
	dirtyGen    uint64          // the medium's write-back error count before the oldest dirty write
	lost        []format.Extent // pool block ranges whose flush failed, not rewritten since (Phys, Len)
	timesDirty  bool            // d's times changed in DRAM only
	// Delayed commit (DESIGN.md §Delayed commit): writes that allocate
	// or extend change d.Size and exts in DRAM only; the next
	// transaction of the inode (fsync, the committer, any metadata
	// change) flushes the data and commits them.
	metaDirty bool            // d.Size or exts ran ahead of the slot on media
	mediaSize uint64          // while metaDirty: the size on media
	fresh     []format.Extent // while metaDirty: pool blocks written since the last commit, not mapped on media (Phys, Len)
	freshAll  bool            // too many fresh ranges to list: every extent counts as fresh
	// commitFailed: the committer's last commit of the inode failed (and
	// was logged).
	commitFailed bool
	linkable     bool // made by CreateTmpfile and not linked yet: Link may give it its first name
}

// Attr is a snapshot of an inode's attributes.
type Attr struct {
	Ino                 Ino
	Gen                 uint64
	Mode                uint32
	UID, GID            uint32
	Nlink               uint32
	Rdev                uint32 // character and block devices
	Size                uint64
	Blocks              uint64 // 512-byte units
	Atime, Mtime, Ctime time.Time
	Btime               time.Time // zero: unknown (an inode made before birth times were kept)
}

// Attr returns the inode's attributes.
func (in *Inode) Attr() Attr {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.attrLocked()
}

func (in *Inode) attrLocked() Attr {
	var blocks uint64
	for _, e := range in.exts {
		blocks += e.Len
	}
	a := Attr{
		Ino: in.Ino, Gen: in.d.Gen, Mode: in.d.Mode, UID: in.d.UID, GID: in.d.GID,
		Nlink: in.d.Nlink, Rdev: in.d.Rdev, Size: in.d.Size, Blocks: blocks * (format.BlockSize / 512),
		Atime: time.Unix(0, in.d.Atime), Mtime: time.Unix(0, in.d.Mtime), Ctime: time.Unix(0, in.d.Ctime),
	}
	if in.d.Btime != 0 {
		a.Btime = time.Unix(0, in.d.Btime)
	}
	return a
}

// IsDir reports whether the inode is a directory.
func (in *Inode) IsDir() bool { return in.typ == format.ModeDir }

// IsSpecial reports a FIFO, socket or device node: no data of its own.
func (in *Inode) IsSpecial() bool { return format.IsSpecialMode(in.typ) }

// Mode returns the file type and permission bits.
func (in *Inode) Mode() uint32 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.d.Mode
}

// Inode returns the live inode ino, or nil.
func (fs *FS) Inode(ino Ino) *Inode {
	fs.imu.Lock()
	defer fs.imu.Unlock()
	return fs.inodes[ino]
}

// Root returns the root directory.
func (fs *FS) Root() *Inode { return fs.Inode(format.RootIno) }

// ---------------------------------------------------------------------
// Changes: a journal transaction plus its DRAM side effects.

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

// ---------------------------------------------------------------------
// Extent arithmetic on sorted lists.

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

// ---------------------------------------------------------------------
// Loading at mount.

// load builds the DRAM inodes from what recovery.Mount decoded: the
// inode table, directory indexes, embedding tables and open sessions.
func (fs *FS) load(st *recovery.State) {
	for _, r := range st.Inodes {
		in := &Inode{fs: fs, Ino: r.Ino, d: r.D, typ: r.D.Mode & format.ModeType, exts: r.Exts, ovf: r.Ovf,
			xattrs: r.Xattrs, xattrBlocks: r.XattrBlocks, refs: r.Refs, parent: r.Parent}
		fs.loadTable(in, r.Table)
		fs.loadSession(in, r.Session)
		fs.inodes[r.Ino] = in
	}
	for _, r := range st.Inodes {
		in := fs.inodes[r.Ino]
		if in.IsDir() {
			fs.loadDir(in, r.Entries)
		}
	}
}

// freeSessionBlocks adds an open session's log regions to a change's
// freed blocks (the file goes away with its session).
func (c *change) freeSessionBlocks(in *Inode) {
	if s := in.sess.Load(); s != nil {
		c.freed = append(c.freed, s.log.Layout().Regions()...)
		c.after = append(c.after, func() { in.sess.Store(nil) })
	}
}

// newIno takes a free inode slot.
func (fs *FS) newIno() (Ino, error) {
	fs.imu.Lock()
	defer fs.imu.Unlock()
	if len(fs.freeIno) == 0 {
		return 0, fmt.Errorf("%w: all %d inodes in use", ErrNoSpace, fs.sb.InodeCount-1)
	}
	ino := fs.freeIno[len(fs.freeIno)-1]
	fs.freeIno = fs.freeIno[:len(fs.freeIno)-1]
	fs.genSeq++
	return ino, nil
}

func (fs *FS) putBackIno(ino Ino) {
	fs.imu.Lock()
	fs.freeIno = append(fs.freeIno, ino)
	fs.imu.Unlock()
}

// freeInode clears an inode's slot; its blocks return to the allocator.
// The caller holds no lock of in.
func (fs *FS) freeInode(in *Inode) error {
	fs.freeing.Add(1) // WaitForgets waits until the blocks are back
	defer fs.freeing.Add(-1)
	// lockData fails only when the caller's context ends while it waits
	// and the caller is dying; with no caller it waits as long as it
	// takes, so this error is never seen (were it, l would be nil).
	l, err := fs.lockData(Caller{}, in, 0, 0, lock.Exclusive, true)
	if err != nil {
		return err
	}
	defer in.locks.Release(l)
	in.mu.Lock()
	defer in.mu.Unlock()
	c := fs.begin()
	c.stageFreeInodeLocked(in)
	if err := c.commit(); err != nil {
		return err
	}
	fs.freed.broadcast()
	return nil
}

// stageFreeInodeLocked stages clearing in's slot and freeing everything
// it owns: blocks, session logs, table descriptor. The slot is free in
// DRAM before the blocks are (after funcs run first), so statfs never
// shows the space back with the inode in use.
func (c *change) stageFreeInodeLocked(in *Inode) {
	fs := c.fs
	var zero [format.InodeSize]byte
	c.tx.Write(fs.sb.InodeOff(in.Ino), zero[:])
	c.freeSessionBlocks(in)
	c.stageFreeTable(in)
	c.freed = append(c.freed, in.exts...)
	for _, b := range in.ovf {
		c.freed = append(c.freed, format.Extent{Phys: b, Len: 1})
	}
	if in.d.Xattr != 0 {
		c.freed = append(c.freed, format.Extent{Phys: in.d.Xattr, Len: in.xattrBlocks})
	}
	c.after = append(c.after, func() {
		in.d.Nlink = 0
		in.exts, in.ovf, in.xattrs = nil, nil, nil
		in.clearPendingLocked()
		fs.imu.Lock()
		delete(fs.inodes, in.Ino)
		fs.freeIno = append(fs.freeIno, in.Ino)
		fs.retireLocksLocked(in)
		fs.imu.Unlock()
	})
}

// syncLocked persists DRAM-only times and flushes written data. It fails
// with ErrIO while any of the file's data failed to persist and has not
// been rewritten since; lost lists the failures new in this call, for the
// caller to log (see LogLost) once it holds no inode lock.
func (in *Inode) syncLocked() (lost []LostRange, err error) {
	lost = in.flushDataLocked()
	if in.timesDirty || in.metaDirty {
		c := in.fs.begin()
		c.putInode(in, in.d)
		err = c.commit()
	}
	if ioe := in.lostErrLocked(); ioe != nil {
		err = ioe
	}
	return lost, err
}

// LostRange is file data whose flush failed.
type LostRange struct {
	Ino          Ino
	Off, Len     int64 // file bytes
	Phys         Blk   // first pool block
	Err          error
	Unattributed bool // the medium reported a write-back failure elsewhere while this data was unflushed
}

// wbGen is the medium's count of write-back failures it may have reported
// to a flush of another range (0 when it has no such notion).
func (fs *FS) wbGen() uint64 {
	if fs.wb != nil {
		return fs.wb.WritebackErrors()
	}
	return 0
}

// flushDataLocked persists the data written since the last call. Ranges
// whose flush failed are remembered in in.lost (until rewritten) and
// returned. When the medium reported a write-back failure anywhere since
// the oldest of these writes, every range flushed counts as failed: the
// failure may have been theirs (msync tells only that some page of the
// pool file was lost).
func (in *Inode) flushDataLocked() []LostRange {
	m := in.fs.m
	ranges := in.dirty
	if in.allDirty {
		ranges = in.exts
	}
	var lost []LostRange
	var failed []format.Extent
	var firstErr error
	for _, g := range flushGroups(ranges, m.Kind() == pmem.Emulated) {
		if err := m.Flush(int64(g.Phys.Off()), int64(g.Len*format.BlockSize)); err != nil {
			for _, e := range ranges {
				if e.Phys >= g.Phys && e.Phys < g.Phys+Blk(g.Len) {
					failed = append(failed, format.Extent{Phys: e.Phys, Len: e.Len})
					lost = append(lost, in.lostRangesLocked(e.Phys, e.Len, err, false)...)
				}
			}
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if len(ranges) > 0 {
		if err := m.Fence(); err != nil {
			// Nothing flushed here is known durable.
			failed, lost = failed[:0], lost[:0]
			for _, e := range ranges {
				failed = append(failed, format.Extent{Phys: e.Phys, Len: e.Len})
				lost = append(lost, in.lostRangesLocked(e.Phys, e.Len, err, false)...)
			}
		} else if g := in.fs.wbGen(); g != in.dirtyGen {
			if firstErr == nil {
				firstErr = fmt.Errorf("the pool medium reported %d write-back failure(s) while this data was unflushed", g-in.dirtyGen)
			}
			failed, lost = failed[:0], lost[:0]
			for _, e := range ranges {
				failed = append(failed, format.Extent{Phys: e.Phys, Len: e.Len})
				lost = append(lost, in.lostRangesLocked(e.Phys, e.Len, firstErr, true)...)
			}
		}
	}
	for _, e := range failed {
		in.lost = addRange(in.lost, e.Phys, e.Len)
	}
	in.dirty, in.allDirty = in.dirty[:0], false
	return lost
}

// flushGap: on an emulated pool, dirty ranges closer than this (blocks)
// are flushed by one msync over both. Each msync is an fsync of the pool
// file to the file system under it (a journal commit and a cache flush on
// ext4), and writing back the few clean pages between costs nothing, so
// 4 writers' interleaved ranges go out in a few calls instead of
// thousands.
const flushGap = 4096 // 16 MiB

// flushGroups returns the pool ranges to flush for ranges (Phys, Len): on
// an emulated pool merged across gaps up to flushGap, else as they are
// (a cache-line flush costs per line, so nothing is gained by covering
// clean lines).
func flushGroups(ranges []format.Extent, emulated bool) []format.Extent {
	if !emulated || len(ranges) < 2 {
		return ranges
	}
	sorted := slices.Clone(ranges)
	slices.SortFunc(sorted, func(a, b format.Extent) int { return cmp.Compare(a.Phys, b.Phys) })
	out := []format.Extent{{Phys: sorted[0].Phys, Len: sorted[0].Len}}
	for _, e := range sorted[1:] {
		last := &out[len(out)-1]
		end := last.Phys + Blk(last.Len)
		if e.Phys <= end+flushGap {
			last.Len = uint64(max(end, e.Phys+Blk(e.Len)) - last.Phys)
			continue
		}
		out = append(out, format.Extent{Phys: e.Phys, Len: e.Len})
	}
	return out
}

// lostErrLocked is ErrIO naming the file's data lost and not rewritten
// since, or nil. Ranges that left the file (truncate, punch) are dropped:
// no byte of the file is unpersisted there any more.
func (in *Inode) lostErrLocked() error {
	if len(in.lost) == 0 {
		return nil
	}
	var kept []format.Extent
	var first LostRange
	var bytes int64
	for _, l := range in.lost {
		for _, r := range in.lostRangesLocked(l.Phys, l.Len, nil, false) {
			kept = addRange(kept, r.Phys, uint64(r.Len/format.BlockSize))
			if bytes == 0 || r.Off < first.Off {
				first = r
			}
			bytes += r.Len
		}
	}
	in.lost = kept
	if len(kept) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d bytes of inode %d (first at file byte %d) failed to persist and have not been rewritten since",
		ErrIO, bytes, in.Ino, first.Off)
}

// lostRangesLocked maps pool blocks [b, b+n) to the file ranges they hold.
func (in *Inode) lostRangesLocked(b Blk, n uint64, err error, unattributed bool) []LostRange {
	var out []LostRange
	for _, e := range in.exts {
		lo, hi := max(b, e.Phys), min(b+Blk(n), e.Phys+Blk(e.Len))
		if lo >= hi {
			continue
		}
		out = append(out, LostRange{Ino: in.Ino, Off: int64(e.Logical+uint64(lo-e.Phys)) * format.BlockSize,
			Len: int64(hi-lo) * format.BlockSize, Phys: lo, Err: err, Unattributed: unattributed})
	}
	return out
}

// addRange adds pool blocks [b, b+n) to a list of ranges (Phys, Len).
func addRange(rs []format.Extent, b Blk, n uint64) []format.Extent {
	return append(cutRange(rs, b, n), format.Extent{Phys: b, Len: n})
}

// cutRange removes pool blocks [b, b+n) from a list of ranges.
func cutRange(rs []format.Extent, b Blk, n uint64) []format.Extent {
	var out []format.Extent
	end := b + Blk(n)
	for _, r := range rs {
		rEnd := r.Phys + Blk(r.Len)
		if rEnd <= b || r.Phys >= end {
			out = append(out, r)
			continue
		}
		if r.Phys < b {
			out = append(out, format.Extent{Phys: r.Phys, Len: uint64(b - r.Phys)})
		}
		if rEnd > end {
			out = append(out, format.Extent{Phys: end, Len: uint64(rEnd - end)})
		}
	}
	return out
}

// LogLost logs each lost range once, with the file's path when it still
// has one. The caller holds no inode lock (PathOf locks directories).
func (fs *FS) LogLost(lost []LostRange) { fs.logLost(lost, true) }

// logLostLocked is LogLost for a caller holding an inode lock: the
// message names the inode, not its path.
func (fs *FS) logLostLocked(lost []LostRange) { fs.logLost(lost, false) }

func (fs *FS) logLost(lost []LostRange, withPath bool) {
	for _, l := range lost {
		path := ""
		if in := fs.Inode(l.Ino); in != nil && withPath {
			path = fs.PathOf(in)
		}
		msg := "file data failed to persist: rewrite these bytes (fsync of the file fails with EIO until then) and check the device holding the pool"
		if l.Unattributed {
			msg = "the pool medium lost data somewhere while this file data was unflushed: rewrite these bytes (fsync of the file fails with EIO until then) and check the device holding the pool"
		}
		fs.log.Error(msg, zap.Uint64("ino", uint64(l.Ino)), zap.String("path", path),
			zap.Int64("offset", l.Off), zap.Int64("length", l.Len), zap.Uint64("pool_block", uint64(l.Phys)),
			zap.Error(l.Err))
	}
}

// markDirtyLocked records pool blocks [b, b+n) as written by a write that
// began when the medium's write-back error count was gen. Writing a lost
// range makes it dirty again: the next fsync persists it anew.
func (in *Inode) markDirtyLocked(b Blk, n uint64, gen uint64) {
	if len(in.lost) > 0 {
		in.lost = cutRange(in.lost, b, n)
	}
	if len(in.dirty) == 0 && !in.allDirty {
		in.dirtyGen = gen
	} else {
		in.dirtyGen = min(in.dirtyGen, gen)
	}
	if in.allDirty {
		return
	}
	if k := len(in.dirty); k > 0 {
		last := &in.dirty[k-1]
		if last.Phys+Blk(last.Len) == b {
			last.Len += n
			return
		}
		if last.Phys <= b && b+Blk(n) <= last.Phys+Blk(last.Len) {
			return
		}
	}
	if len(in.dirty) >= 4096 {
		in.allDirty = true
		return
	}
	in.dirty = append(in.dirty, format.Extent{Phys: b, Len: n})
}
