package core

import (
	"fmt"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

// SetAttr changes are applied when their field is non-nil.
type SetAttr struct {
	Mode         *uint32 // permission bits only
	UID, GID     *uint32
	Atime, Mtime *time.Time
	TimesNow     bool // the times set are the current time (utimes(2) with no times), not chosen by the caller
	Size         *uint64
}

// Setattr applies chmod, chown, utimens and truncate.
func (fs *FS) Setattr(in *Inode, sa SetAttr) error {
	return fs.SetattrAs(Caller{}, in, sa)
}

// SetattrAs is Setattr on behalf of a caller: a truncate or chown clears
// setuid/setgid as the kernel does on a local file system (see
// cred.afterData, cred.afterChown), in the same transaction. The mode a
// chmod sets is taken as given: the kernel has applied its rules to it.
func (fs *FS) SetattrAs(cl Caller, in *Inode, sa SetAttr) error {
	op := &attrOp{sa: sa, cl: cl}
	if sa.Size != nil {
		if !in.IsTable() {
			if err := fs.truncate(in, *sa.Size, op); err != nil || sa.Mode == nil {
				return err
			}
			return fs.chmodACL(in)
		}
		if err := fs.Truncate(in, *sa.Size); err != nil {
			return err
		}
	}
	chown := op.chown()
	if sa.Mode == nil && !chown && sa.Atime == nil && sa.Mtime == nil {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	op.credLocked(in)
	// notify_change's rules: touching the times only needs the file not
	// to be immutable; a mode, owner or chosen time not append-only either.
	times := sa.Atime != nil || sa.Mtime != nil
	if sa.Mode != nil || chown || times && !sa.TimesNow {
		if err := in.checkRemoveLocked(); err != nil {
			return err
		}
	} else if err := in.checkChangeLocked(); err != nil {
		return err
	}
	nd := in.d
	op.apply(&nd)
	if sa.Mode != nil {
		// chmod rewrites the access ACL's user::, mask:: (or group::)
		// and other:: entries with the inode, as posix_acl_chmod does.
		if xs, changed := chmodACLLocked(in, nd.Mode); changed {
			return fs.putXattrsInodeLocked(in, xs, nd)
		}
	}
	c := fs.begin()
	c.putInode(in, nd)
	return c.commit()
}

// attrOp is what SetattrAs changes besides the size, applied by
// truncate in the same transaction when the size changes too.
type attrOp struct {
	sa SetAttr
	cl Caller
	cr cred // set by credLocked
}

func (a *attrOp) chown() bool { return a.sa.UID != nil || a.sa.GID != nil }

// credLocked reads the caller's credentials when the change may clear
// setuid or setgid: a truncate or chown of a file that has either (or is
// given either by this chmod). It may drop and retake in.mu: call it
// right after taking in.mu, before reading in's fields.
// Precondition: in.mu is held.
func (a *attrOp) credLocked(in *Inode) {
	mode := in.d.Mode
	if a.sa.Mode != nil {
		mode = *a.sa.Mode
	}
	a.cr = credLocked(a.cl, in, (a.sa.Size != nil || a.chown()) && hasPrivs(mode))
}

// apply makes the changes to nd, in's next inode.
func (a *attrOp) apply(nd *format.Inode) {
	sa := a.sa
	if sa.Mode != nil {
		nd.Mode = nd.Mode&format.ModeType | *sa.Mode&format.ModePerm
	}
	if a.chown() {
		nd.Mode = a.cr.afterChown(nd.Mode, nd.GID)
	}
	if sa.UID != nil {
		nd.UID = *sa.UID
	}
	if sa.GID != nil {
		nd.GID = *sa.GID
	}
	if sa.Size != nil {
		nd.Mode = a.cr.afterData(nd.Mode, nd.GID)
	}
	if sa.Atime != nil {
		nd.Atime = sa.Atime.UnixNano()
	}
	if sa.Mtime != nil {
		nd.Mtime = sa.Mtime.UnixNano()
	}
	nd.Ctime = time.Now().UnixNano()
}

// Truncate sets the file size, freeing blocks past it.
func (fs *FS) Truncate(in *Inode, size uint64) error {
	return fs.truncate(in, size, nil)
}

// truncate is Truncate; op, if set, makes further changes to the
// inode in the same transaction.
func (fs *FS) truncate(in *Inode, size uint64, op *attrOp) error {
	if size > MaxFileSize {
		return ErrTooBig
	}
	if in.IsDir() {
		return ErrIsDir
	}
	if in.IsSpecial() {
		return ErrInvalid // as truncate(2) of a FIFO or device
	}
	if t, ok := in.Table(); ok {
		if size == t.Size() {
			return nil
		}
		return fmt.Errorf("%w: a table's size is rows x dim x dtype size (%d bytes)", ErrTable, t.Size())
	}
	unlock, err := fs.lockWhole(in)
	if err != nil {
		return err
	}
	defer unlock()
	if op != nil {
		op.credLocked(in)
	}
	if err := in.checkRemoveLocked(); err != nil {
		return err
	}
	now := time.Now().UnixNano()
	c := fs.begin()
	c.freeing = true // may split extents on a full pool
	nd := in.d
	nd.Mtime, nd.Ctime = now, now
	nd.Size = size
	old := in.d.Size
	if size != old {
		c.stageAbandonLocked(in, &nd)
	}
	if size > old {
		if err := fs.zeroTailLocked(in, int64(old), int64(size)); err != nil {
			c.abort() // an abandoned session holds its commit lock until then
			return err
		}
	} else if size < old {
		keep := (size + bs - 1) / bs
		kept, removed := cutExtents(in.exts, keep, format.MaxFileBlocks)
		if len(removed) > 0 {
			if err := c.putExtentsLocked(in, &nd, kept); err != nil {
				c.abort()
				return err
			}
			c.freed = append(c.freed, removed...)
		}
	}
	if op != nil {
		op.apply(&nd)
	}
	c.putInode(in, nd)
	if err := c.commit(); err != nil {
		return err
	}
	if size < old {
		// Best effort: growing the file again clears the tail anyway.
		_ = fs.zeroTailLocked(in, int64(size), int64(old))
	}
	return nil
}
