package core

import (
	"fmt"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

// File attributes, as chattr(1) sets them (FS_IOC_SETFLAGS): the
// format.InodeAttrFlags bits of the inode's flags. The kernel enforces
// immutable and append-only itself only for the inode flags of a local
// file system; a FUSE inode has none, so the checks the VFS makes for
// ext4 or tmpfs are made here, where each operation reaches the pool.

// FileFlags returns in's file attributes (format.InodeAttrFlags bits).
func (fs *FS) FileFlags(in *Inode) uint32 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.d.Flags & format.InodeAttrFlags
}

// SetFileFlags sets in's file attributes to flags (format.InodeAttrFlags
// bits; others are ErrNotSupp) and its ctime, in one transaction. Setting
// or clearing immutable or append-only needs CAP_LINUX_IMMUTABLE, as on a
// local file system; the kernel has checked ownership.
func (fs *FS) SetFileFlags(cl Caller, in *Inode, flags uint32) error {
	if flags&^format.InodeAttrFlags != 0 {
		return ErrNotSupp
	}
	if in.IsTable() && flags != 0 {
		return fmt.Errorf("%w: file attributes: %w", ErrNotSupp, ErrTable)
	}
	const guarded = format.InodeImmutable | format.InodeAppend
	in.mu.Lock()
	defer in.mu.Unlock()
	// Credentials only when a guarded flag changes, decided under in.mu
	// with the change (credLocked reads /proc with in.mu dropped).
	cr := credLocked(cl, in, (in.d.Flags^flags)&guarded != 0)
	old := in.d.Flags & format.InodeAttrFlags
	if (old^flags)&guarded != 0 && !cr.immut {
		return ErrFlagPerm
	}
	nd := in.d
	nd.Flags = nd.Flags&^format.InodeAttrFlags | flags
	nd.Ctime = time.Now().UnixNano()
	c := fs.begin()
	c.putInode(in, nd)
	return c.commit()
}

// checkChangeLocked refuses a change to in's data, attributes or names
// (or, for a directory, its entries) when in is immutable.
func (in *Inode) checkChangeLocked() error {
	if in.d.Flags&format.InodeImmutable != 0 {
		return ErrImmutable
	}
	return nil
}

// checkRemoveLocked refuses what neither an immutable nor an append-only
// inode allows: removing or renaming it (or, for a directory, one of its
// entries), truncating it, changing its mode, owner or times explicitly,
// its extended attributes or ACLs.
func (in *Inode) checkRemoveLocked() error {
	if err := in.checkChangeLocked(); err != nil {
		return err
	}
	if in.d.Flags&format.InodeAppend != 0 {
		return ErrAppendOnly
	}
	return nil
}

// CheckOpen refuses an open for writing (or truncating) of an immutable
// file, and of an append-only one unless it appends and does not
// truncate, as the VFS does at open on a local file system.
func (fs *FS) CheckOpen(in *Inode, write, appendMode, trunc bool) error {
	if !write && !trunc {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.checkChangeLocked(); err != nil {
		return err
	}
	if in.d.Flags&format.InodeAppend != 0 && (trunc || !appendMode) {
		return ErrAppendOnly
	}
	return nil
}
