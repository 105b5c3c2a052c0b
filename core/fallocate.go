package core

import (
	"fmt"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

// Fallocate modes (fallocate(2)).
const (
	FallocKeepSize  = 0x1
	FallocPunchHole = 0x2
)

// Fallocate allocates (mode 0 or KEEP_SIZE) or punches (PUNCH_HOLE|KEEP_SIZE)
// [off, off+n).
func (fs *FS) Fallocate(in *Inode, off, n uint64, mode uint32) error {
	return fs.FallocateAs(Caller{}, in, off, n, mode)
}

// FallocateAs is Fallocate on behalf of a caller, who may lose the
// file's setuid/setgid bits as by a write.
func (fs *FS) FallocateAs(cl Caller, in *Inode, off, n uint64, mode uint32) error {
	if in.IsTable() {
		return fmt.Errorf("%w: fallocate: %w", ErrNotSupp, ErrTable)
	}
	if n == 0 || off+n > MaxFileSize || off+n < off {
		if n == 0 {
			return ErrInvalid
		}
		return ErrTooBig
	}
	switch mode {
	case 0, FallocKeepSize, FallocPunchHole | FallocKeepSize:
	default:
		return ErrNotSupp
	}
	if in.IsDir() {
		return ErrIsDir
	}
	unlock, err := fs.lockWhole(in)
	if err != nil {
		return err
	}
	defer unlock()
	// Credentials only when the file has setuid or setgid, decided under
	// in.mu with the change.
	cr := credLocked(cl, in, hasPrivs(in.d.Mode))
	// An append-only file may only be given blocks, as vfs_fallocate says.
	if err := in.checkChangeLocked(); err != nil {
		return err
	}
	if mode&^FallocKeepSize != 0 && in.d.Flags&format.InodeAppend != 0 {
		return ErrAppendOnly
	}
	now := time.Now().UnixNano()
	c := fs.begin()
	c.freeing = mode&FallocPunchHole != 0 // a punch may split an extent on a full pool
	nd := in.d
	nd.Mode = cr.afterData(nd.Mode, nd.GID)
	if mode&FallocPunchHole != 0 {
		return fs.punchHoleLocked(in, c, nd, off, min(off+n, in.d.Size), now)
	}
	return fs.allocateLocked(in, c, nd, off, off+n, mode&FallocKeepSize != 0, now)
}

// allocateLocked gives [off, end) blocks that read as zeros (unwritten
// extents) and, unless keepSize, grows the file to end; nd is in's next
// inode.
// Precondition: in.mu is held.
func (fs *FS) allocateLocked(in *Inode, c *change, nd format.Inode, off, end uint64, keepSize bool, now int64) error {
	added, err := c.fillHolesLocked(in, in.holesLocked(off/bs, (end+bs-1)/bs), true, true)
	if err != nil {
		c.abort()
		return err
	}
	if !keepSize && end > in.d.Size {
		if err := fs.zeroTailLocked(in, int64(in.d.Size), int64(end)); err != nil {
			c.abort()
			return err
		}
		nd.Size = end
	}
	if len(added) > 0 {
		if err := c.putExtentsLocked(in, &nd, mergeExtents(in.exts, added)); err != nil {
			c.abort()
			return err
		}
	}
	nd.Ctime = now
	if nd.Size != in.d.Size {
		nd.Mtime = now
	}
	c.putInode(in, nd)
	return c.commit()
}

// punchHoleLocked takes the whole blocks of [off, end) out of the file
// and clears its partial edges in place; nd is in's next inode.
// Precondition: in.mu is held.
func (fs *FS) punchHoleLocked(in *Inode, c *change, nd format.Inode, off, end uint64, now int64) error {
	if off >= end {
		return nil
	}
	full0, full1 := (off+bs-1)/bs, end/bs
	if err := fs.clearEdgesLocked(in, off, end, full0, full1); err != nil {
		return err
	}
	if full1 > full0 {
		kept, removed := cutExtents(in.exts, full0, full1)
		if len(removed) > 0 {
			if err := c.putExtentsLocked(in, &nd, kept); err != nil {
				c.abort()
				return err
			}
			c.freed = append(c.freed, removed...)
		}
	}
	nd.Mtime, nd.Ctime = now, now
	c.stageAbandonLocked(in, &nd)
	c.putInode(in, nd)
	return c.commit()
}

// clearEdgesLocked clears and persists the bytes of [off, end) outside
// its whole blocks [full0, full1) (all of it when it has none). An edge
// whose clearing failed (store, flush or fence) reads as zeros, partly
// or wholly, but may not be on media: fsync says so until it is
// rewritten.
// Precondition: in.mu is held.
func (fs *FS) clearEdgesLocked(in *Inode, off, end, full0, full1 uint64) error {
	edges := [][2]uint64{{off, end}}
	if full0 <= full1 {
		edges = [][2]uint64{{off, full0 * bs}, {full1 * bs, end}}
	}
	var werr error
	var touched []Blk
	for _, r := range edges {
		if r[1] <= r[0] {
			continue
		}
		walk(in.exts, int64(r[0]), int64(r[1]-r[0]), func(p int64, pos, k int) {
			if p < 0 || werr != nil {
				return
			}
			touched = append(touched, Blk(p/bs))
			what := fmt.Sprintf("clearing file bytes [%d, %d)", int(r[0])+pos, int(r[0])+pos+k)
			if err := fs.zeroPool(p, int64(k)); err != nil {
				werr = fmt.Errorf("%s: %w", what, err)
			} else if err := fs.m.Flush(p, int64(k)); err != nil {
				werr = ioErr(what, err)
			}
		})
	}
	if err := fs.m.Fence(); err != nil && werr == nil {
		werr = ioErr("clearing file bytes at the edges of the hole", err)
	}
	if werr != nil {
		for _, b := range touched {
			in.lost = addRange(in.lost, b, 1)
		}
	}
	return werr
}
