package core

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/lock"
	"github.com/dnnfs/dnnfs/pmem"
)

// writePool stores p at pool byte offset off (pmem.Medium.WriteAt: a
// pwrite of the pool file on an emulated pool). A failure leaves any
// prefix of p stored, which is not yet durable.
func (fs *FS) writePool(p []byte, off int64) error {
	if err := fs.m.WriteAt(p, off); err != nil {
		if errors.Is(err, pmem.ErrNoSpace) {
			return fmt.Errorf("%w: %v", ErrNoSpace, err)
		}
		return ioErr(fmt.Sprintf("writing %d bytes at pool byte %d", len(p), off), err)
	}
	return nil
}

// zeroPool clears n bytes at pool offset off.
func (fs *FS) zeroPool(off, n int64) error {
	for n > 0 {
		k := min(n, int64(len(fs.zero)))
		if err := fs.writePool(fs.zero[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

// xattrCapability holds a file's capabilities; a write removes it, as the
// kernel's file_remove_privs does.
const xattrCapability = "security.capability"

// Write stores data at off (at the end of file when appendMode) and
// returns the number of bytes written.
//
// Nothing is persisted here. Blocks the write allocates and a size it
// grows stay in DRAM until the inode's next commit, which persists the
// data (and the zeros around it) before the transaction that maps the
// blocks, so a crash never exposes stale bytes (DESIGN.md §Delayed
// commit). Overwrites of mapped blocks are persisted by fsync.
func (fs *FS) Write(in *Inode, off int64, data []byte, appendMode bool) (int, error) {
	return fs.WriteAs(Caller{}, in, off, data, appendMode)
}

// WriteAs is Write on behalf of a caller. A write inside the file takes an
// exclusive range lock on its blocks and copies its data holding no other
// lock, so writers of disjoint ranges run in parallel; a write that may
// extend the file (or appends) changes the size and takes the whole-file
// lock.
func (fs *FS) WriteAs(cl Caller, in *Inode, off int64, data []byte, appendMode bool) (int, error) {
	n, _, err := fs.WritePrivsAs(cl, in, off, data, appendMode)
	return n, err
}

// WritePrivsAs is WriteAs that also reports whether the write cleared
// the file's setuid/setgid bits (the kernel's cached mode is then stale).
func (fs *FS) WritePrivsAs(cl Caller, in *Inode, off int64, data []byte, appendMode bool) (n int, killed bool, err error) {
	if data, err = checkWrite(in, off, data, appendMode); err != nil || len(data) == 0 {
		return 0, false, err
	}
	l, err := fs.lockWrite(cl, in, off, len(data), appendMode)
	if err != nil {
		return 0, false, err
	}
	defer in.locks.Release(l)
	var w writePlan // on the stack: no allocation per write
	if err := fs.planWrite(&w, in, off, data, appendMode); err != nil {
		return 0, false, err
	}
	if err := fs.copyWrite(in, &w); err != nil {
		return 0, false, err
	}
	if killed, err = fs.publishWrite(in, &w, cl); err != nil {
		return 0, false, err
	}
	fs.sessionProgress(in, cl, l.PID, uint64(w.off), uint64(len(w.data)), true)
	return len(w.data), killed, nil
}

// checkWrite refuses a write the file cannot take and clamps one that
// crosses MaxFileSize (an append is clamped at the end of file, by
// planWrite).
func checkWrite(in *Inode, off int64, data []byte, appendMode bool) ([]byte, error) {
	if in.IsDir() {
		return nil, ErrIsDir
	}
	if in.IsTable() {
		return nil, fmt.Errorf("%w: its bytes are written through the SSD tier", ErrTable)
	}
	if off < 0 {
		return nil, ErrInvalid
	}
	if len(data) == 0 || appendMode {
		return data, nil
	}
	return clampWrite(off, data)
}

// lockWrite takes the write's range lock: its own blocks for a write
// inside the file, the whole file for one that may extend it (or an
// append). A write inside the file that finds the file shrunk below its
// end once it holds its blocks retries with the whole-file lock.
func (fs *FS) lockWrite(cl Caller, in *Inode, off int64, n int, appendMode bool) (*lock.Lock, error) {
	end := off + int64(n)
	for {
		in.mu.Lock()
		size := int64(in.d.Size)
		ferr := in.checkWriteLocked(off, appendMode)
		in.mu.Unlock()
		if ferr != nil {
			return nil, ferr
		}
		whole := appendMode || end > size
		l, err := fs.lockData(cl, in, off, int64(n), lock.Exclusive, whole)
		if err != nil {
			return nil, err
		}
		if whole || l.IsWhole() {
			return l, nil
		}
		in.mu.Lock()
		inside := end <= int64(in.d.Size)
		in.mu.Unlock()
		if inside {
			return l, nil
		}
		in.locks.Release(l) // the file shrank meanwhile: this write extends it now
	}
}

// checkWriteLocked refuses a write to an immutable file, or to an
// append-only one other than at its end (the open asked for O_APPEND).
func (in *Inode) checkWriteLocked(off int64, appendMode bool) error {
	if err := in.checkChangeLocked(); err != nil {
		return err
	}
	if in.d.Flags&format.InodeAppend != 0 && !appendMode && off < int64(in.d.Size) {
		return ErrAppendOnly
	}
	return nil
}

// writePlan is a write between its planning and its publication.
type writePlan struct {
	off, end  int64
	data      []byte
	b0, b1    uint64          // file blocks [b0, b1) the write touches
	c         *change         // holds the blocks allocated for holes until they are the inode's; nil if none
	added     []format.Extent // extents for the holes
	unwritten bool            // the write reaches blocks fallocate left unwritten
	old       []format.Extent // the extent list before the write
	exts      []format.Extent // old with added merged in: where the data goes
	gen       uint64          // the medium's write-back error count before the copy
	werr      error           // clearing the old end of file failed: the write fails after the copy step aborts
}

// planWrite fills w: under in.mu, it checks the flags, fixes an append's
// offset, allocates blocks for the holes the write covers and clears the
// bytes between the old end of file and the write.
func (fs *FS) planWrite(w *writePlan, in *Inode, off int64, data []byte, appendMode bool) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	// Again, now that the write holds its range: lockWrite's check came
	// before its wait, and a flag set meanwhile refuses the write as one
	// set before it began.
	if err := in.checkWriteLocked(off, appendMode); err != nil {
		return err
	}
	if appendMode {
		off = int64(in.d.Size)
		var err error
		if data, err = clampWrite(off, data); err != nil {
			return err
		}
	}
	end := off + int64(len(data))
	size := int64(in.d.Size)
	*w = writePlan{off: off, end: end, data: data, b0: uint64(off) / bs, b1: (uint64(end) + bs - 1) / bs}
	// A change only for a write that allocates (it holds the blocks
	// until they are the inode's) or kills privileges (publishWrite): an
	// overwrite, or a write into fallocated blocks, needs none.
	if holes := in.holesLocked(w.b0, w.b1); len(holes) > 0 {
		w.c = fs.begin()
		var err error
		if w.added, err = w.c.fillHolesLocked(in, holes, false, false); err != nil {
			w.c.abort()
			return err
		}
	}
	// Blocks fallocate left unwritten become data: the extent map
	// changes in DRAM, committed with the size (§Delayed commit).
	w.unwritten = in.unwrittenLocked(w.b0, w.b1)
	if off > size { // only under the whole-file lock
		w.werr = fs.zeroTailLocked(in, size, off)
	}
	w.old = in.exts
	return nil
}

// copyWrite stores the data, holding only the range lock: its blocks are
// the write's alone. A failure gives back the blocks the write allocated
// and records the blocks it overwrote in place as lost.
func (fs *FS) copyWrite(in *Inode, w *writePlan) error {
	// Before the copy: a write-back failure the medium reports from here
	// on may be of these bytes.
	w.gen = fs.wbGen()
	werr := w.werr
	for _, e := range w.added { // fresh blocks only partly covered start as zeros
		for _, fb := range []uint64{e.Logical, e.End() - 1} {
			if fb*bs < uint64(w.off) || (fb+1)*bs > uint64(w.end) {
				if err := fs.zeroPool(int64((e.Phys + Blk(fb-e.Logical)).Off()), bs); err != nil && werr == nil {
					werr = err
				}
			}
		}
	}
	w.exts = w.old
	if len(w.added) > 0 {
		w.exts = mergeExtents(w.old, w.added)
	}
	stored := 0 // bytes of data stored, or being stored when werr came
	walk(w.exts, w.off, int64(len(w.data)), func(p int64, pos, k int) {
		if werr == nil {
			stored = pos + k
			werr = fs.writePool(w.data[pos:pos+k], p)
		}
	})
	if werr != nil {
		if w.c != nil {
			w.c.abort()
		}
		fs.LogLost(in.lostOverwrite(w.old, w.off, stored, werr))
	}
	return werr
}

// lostOverwrite records the blocks a failed write overwrote in place
// (the first stored bytes at off): they may hold some of its bytes now,
// not durable, and fsync says so until they are rewritten.
func (in *Inode) lostOverwrite(old []format.Extent, off int64, stored int, werr error) []LostRange {
	in.mu.Lock()
	defer in.mu.Unlock()
	var lost []LostRange
	walk(old, off, int64(stored), func(p int64, _, k int) {
		if p >= 0 {
			first := Blk(p / bs)
			n := (uint64(p)+uint64(k)+bs-1)/bs - uint64(first)
			in.lost = addRange(in.lost, first, n)
			lost = append(lost, in.lostRangesLocked(first, n, werr, false)...)
		}
	})
	return lost
}

// publishWrite makes the stored write visible under in.mu: dirty ranges
// for fsync, the new size and extents in DRAM (Delayed commit, DESIGN.md
// §Delayed commit: what the write stored is flushed by fsync, or by the
// next transaction of the inode before it maps the fresh blocks or grows
// the size on media; a crash loses them as it loses any write not
// fsync'ed, and never shows a block before its data), and the
// privileges the write kills. It reports whether it cleared
// setuid/setgid.
func (fs *FS) publishWrite(in *Inode, w *writePlan, cl Caller) (killed bool, err error) {
	fs.stats.Writes.Add(1)
	fs.stats.WriteBytes.Add(uint64(len(w.data)))
	now := time.Now().UnixNano()
	in.mu.Lock()
	defer in.mu.Unlock()
	// A write by a caller without CAP_FSETID clears setuid/setgid (the
	// kernel leaves that to us on direct-I/O writes). Its credentials are
	// read only when the file has one of the bits, decided here, under
	// in.mu, with the change.
	cr := credLocked(cl, in, hasPrivs(in.d.Mode))
	walk(w.exts, w.off, int64(len(w.data)), func(p int64, _, k int) {
		if p >= 0 {
			first := Blk(p / bs)
			in.markDirtyLocked(first, (uint64(p)+uint64(k)+bs-1)/bs-uint64(first), w.gen)
		}
	})
	for _, e := range w.added { // zeros around the data, too
		in.markDirtyLocked(e.Phys, e.Len, w.gen)
	}
	in.d.Mtime, in.d.Ctime = now, now
	in.timesDirty = true
	if len(w.added) > 0 || w.unwritten || uint64(w.end) > in.d.Size {
		in.growLocked(w)
	}
	return fs.killPrivsLocked(in, w.c, cr, now)
}

// growLocked installs the write's new blocks, written extents and size
// in DRAM, and hands the inode to the committer.
func (in *Inode) growLocked(w *writePlan) {
	in.notePendingLocked()
	if len(w.added) > 0 {
		// Merge into the current list: writers of other ranges may
		// have added extents since the snapshot.
		in.exts = mergeExtents(in.exts, w.added)
		for _, e := range w.added {
			in.noteFreshLocked(e.Phys, e.Len)
		}
		w.c.allocated = nil // the inode's now, in DRAM
	}
	if w.unwritten {
		in.exts = writtenExtents(in.exts, w.b0, w.b1)
	}
	in.d.Size = max(uint64(w.end), in.d.Size)
}

// killPrivsLocked is the kernel's file_remove_privs, which direct-I/O
// writes leave to us: setuid/setgid for a caller without CAP_FSETID, and
// file capabilities (security.capability) for any writer. c is the
// write's change, or nil.
// Precondition: in.mu is held.
func (fs *FS) killPrivsLocked(in *Inode, c *change, cr cred, now int64) (killed bool, err error) {
	nd := in.d
	nd.Mode = cr.afterData(in.d.Mode, in.d.GID)
	capAt := slices.IndexFunc(in.xattrs, func(x format.Xattr) bool { return x.Name == xattrCapability })
	if nd.Mode == in.d.Mode && capAt < 0 {
		return false, nil
	}
	if c == nil {
		c = fs.begin()
	}
	if capAt >= 0 {
		nd.Ctime = now
		if err := c.stageXattrsLocked(in, &nd, slices.Delete(slices.Clone(in.xattrs), capAt, capAt+1)); err != nil {
			c.abort()
			return false, err
		}
	}
	killed = nd.Mode != in.d.Mode // before the commit installs nd
	c.putInode(in, nd)
	if err := c.commit(); err != nil {
		return false, err
	}
	return killed, nil
}

// clampWrite applies the kernel's generic_write_checks limit to a write
// of data at off: none may start at or past MaxFileSize (EFBIG), and one
// crossing it is cut short there. The kernel does it before a FUSE write
// reaches us (the FUSE super block's s_maxbytes is MAX_LFS_FILESIZE);
// in-process callers get the same answer, and no end overflows an int64.
func clampWrite(off int64, data []byte) ([]byte, error) {
	if off >= MaxFileSize {
		return nil, ErrTooBig
	}
	return data[:min(int64(len(data)), MaxFileSize-off)], nil
}

// zeroTailLocked clears [from, to) within the block holding from, if that
// block is mapped: bytes past the old end of file must read as zeros once
// the file grows over them.
// Precondition: in.mu is held.
func (fs *FS) zeroTailLocked(in *Inode, from, to int64) error {
	if from%bs == 0 {
		return nil
	}
	phys, _, ok := in.lookupLocked(uint64(from) / bs)
	if !ok {
		return nil
	}
	p := int64(phys.Off()) + from%bs
	n := min(to-from, bs-from%bs) // the block's end may be 2^63: no int64
	if err := fs.zeroPool(p, n); err != nil {
		return err
	}
	if err := fs.m.Persist(p, n); err != nil {
		return ioErr(fmt.Sprintf("clearing file bytes [%d, %d)", from, from+n), err)
	}
	return nil
}
