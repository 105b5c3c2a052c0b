package core

import (
	"slices"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

// Rename flags (renameat2).
const (
	RenameNoReplace = 1
	RenameExchange  = 2
	RenameWhiteout  = 4 // leave a whiteout (a 0:0 character device) at the source name
)

// isAncestor reports whether a is d or an ancestor of d. It reads the
// parents of directories it has not locked: parents change only under
// FS.nsMu.
// Precondition: FS.nsMu is held.
func (fs *FS) isAncestor(a, d *Inode) bool {
	for i := 0; i < 1<<16; i++ {
		if d == a {
			return true
		}
		if d.Ino == format.RootIno {
			return false
		}
		d = fs.Inode(d.parent)
		if d == nil {
			return false
		}
	}
	return true
}

// Rename moves src/name to dst/newName, replacing a target atomically.
func (fs *FS) Rename(src *Inode, name string, dst *Inode, newName string, flags uint32) error {
	return fs.RenameAs(Caller{}, src, name, dst, newName, flags)
}

// RenameAs is Rename on behalf of a caller, who owns the whiteout that
// RenameWhiteout leaves (as overlayfs asks of its upper layer): made in
// the rename's transaction, so no crash shows the name missing.
func (fs *FS) RenameAs(cl Caller, src *Inode, name string, dst *Inode, newName string, flags uint32) error {
	if err := checkRename(name, newName, flags); err != nil {
		return err
	}
	fs.nsMu.Lock()
	defer fs.nsMu.Unlock()
	var ls lockSet
	defer ls.unlock()
	r := &renameOp{src: src, dst: dst, name: name, newName: newName, flags: flags}
	if noop, err := fs.resolveRenameLocked(r, &ls); noop || err != nil {
		return err
	}
	return fs.commitRenameLocked(r, cl)
}

// checkRename refuses what no rename may ask: unknown or conflicting
// flags, a bad new name, an old name too long to exist.
func checkRename(name, newName string, flags uint32) error {
	if flags&^(RenameNoReplace|RenameExchange|RenameWhiteout) != 0 || flags&RenameExchange != 0 && flags != RenameExchange {
		return ErrInvalid
	}
	if err := checkName(newName); err != nil {
		return err
	}
	if len(name) > format.MaxNameLen {
		return ErrNameTooLong
	}
	return nil
}

// lockSet holds the Inode.mu of a rename's inodes (src, dst, mover,
// target: at most four), each once: safe only under FS.nsMu (DESIGN.md
// §Lock order). An array, not a map: no allocation per rename.
type lockSet struct {
	held [4]*Inode
	n    int
}

// lock takes in.mu unless held already (or in is nil).
func (ls *lockSet) lock(in *Inode) {
	if in == nil || slices.Contains(ls.held[:ls.n], in) {
		return
	}
	in.mu.Lock()
	ls.held[ls.n] = in
	ls.n++
}

func (ls *lockSet) unlock() {
	for _, in := range ls.held[:ls.n] {
		in.mu.Unlock()
	}
}

// renameOp is one rename between its checks and its commit.
type renameOp struct {
	src, dst      *Inode
	name, newName string
	flags         uint32
	mover, target *Inode   // what name and newName name (target nil if nothing)
	me, te        dirEntry // their entries
	exists        bool     // newName exists
}

// resolveRenameLocked looks both names up, locks the inodes concerned
// and checks the rename may happen (may_delete, may_create, types,
// emptiness). noop: the names are two links to one file.
// Precondition: FS.nsMu is held.
func (fs *FS) resolveRenameLocked(r *renameOp, ls *lockSet) (noop bool, err error) {
	src, dst := r.src, r.dst
	ls.lock(src)
	ls.lock(dst)
	if src.dir == nil || dst.dir == nil {
		return false, ErrNotDir
	}
	if dst.d.Nlink == 0 {
		return false, ErrNotFound
	}
	var ok bool
	if r.mover, r.me, ok = fs.lookupLocked(src, r.name); !ok || r.mover == nil {
		return false, ErrNotFound
	}
	r.target, r.te, r.exists = fs.lookupLocked(dst, r.newName)
	ls.lock(r.mover)
	ls.lock(r.target)
	if err := fs.checkRenameNamesLocked(r); err != nil {
		return false, err
	}
	if r.exists && r.target == r.mover {
		return true, nil // two links to one file: nothing to do
	}
	return false, r.checkRenameInodesLocked()
}

// checkRenameNamesLocked refuses a rename by what the names are: a
// directory into itself, a missing target to exchange, an existing one
// not to replace.
// Precondition: FS.nsMu and the Inode.mu of r's inodes are held.
func (fs *FS) checkRenameNamesLocked(r *renameOp) error {
	if r.mover.IsDir() && fs.isAncestor(r.mover, r.dst) {
		return ErrInvalid
	}
	if r.exists && r.target.IsDir() && fs.isAncestor(r.target, r.src) && r.flags&RenameExchange != 0 {
		return ErrInvalid
	}
	if r.flags&RenameExchange != 0 && !r.exists {
		return ErrNotFound
	}
	if r.flags&RenameNoReplace != 0 && r.exists {
		return ErrExist
	}
	return nil
}

// checkRenameInodesLocked is may_delete for the names that go (or
// change) and may_create for a new one, then the type rules of a
// replacing rename.
// Precondition: the Inode.mu of r's inodes are held.
func (r *renameOp) checkRenameInodesLocked() error {
	for _, in := range []*Inode{r.src, r.mover} {
		if err := in.checkRemoveLocked(); err != nil {
			return err
		}
	}
	if r.exists {
		for _, in := range []*Inode{r.dst, r.target} {
			if err := in.checkRemoveLocked(); err != nil {
				return err
			}
		}
	} else if err := r.dst.checkChangeLocked(); err != nil {
		return err
	}
	if r.exists && r.flags&RenameExchange == 0 {
		switch {
		case r.mover.IsDir() && !r.target.IsDir():
			return ErrNotDir
		case !r.mover.IsDir() && r.target.IsDir():
			return ErrIsDir
		case r.target.IsDir() && len(r.target.dir.names) > 0:
			return ErrNotEmpty
		}
	}
	return nil
}

// renameStage is what staging a rename changes: the directories' next
// inodes (dd is &sd when src is dst), and their subdirectory counts.
type renameStage struct {
	sd, dstD         format.Inode
	dd               *format.Inode
	nsubSrc, nsubDst int
	wo               *Inode // the whiteout RenameWhiteout leaves
}

// commitRenameLocked stages the entries and inodes a resolved rename
// changes, commits them and publishes the DRAM side.
// Precondition: FS.nsMu and the Inode.mu of r's inodes are held.
func (fs *FS) commitRenameLocked(r *renameOp, cl Caller) error {
	now := time.Now().UnixNano()
	c := fs.begin()
	st := &renameStage{sd: r.src.d}
	st.sd.Mtime, st.sd.Ctime = now, now
	st.dd = &st.sd
	if r.dst != r.src {
		st.dstD = r.dst.d
		st.dstD.Mtime, st.dstD.Ctime = now, now
		st.dd = &st.dstD
	}
	md := r.mover.d
	md.Ctime = now
	if r.flags&RenameExchange != 0 {
		c.stageExchangeLocked(r, st, now)
	} else if err := fs.stageMoveLocked(c, r, st, cl, now); err != nil {
		c.abort()
		return err
	}
	c.putInode(r.mover, md)
	c.putInode(r.src, st.sd)
	if r.dst != r.src {
		c.putInode(r.dst, st.dstD)
	}
	if err := c.commit(); err != nil {
		if st.wo != nil {
			fs.putBackIno(st.wo.Ino)
		}
		return err
	}
	if st.wo != nil {
		fs.imu.Lock()
		fs.inodes[st.wo.Ino] = st.wo
		fs.imu.Unlock()
	}
	r.src.dir.nsub = uint32(int(r.src.dir.nsub) + st.nsubSrc)
	r.dst.dir.nsub = uint32(int(r.dst.dir.nsub) + st.nsubDst)
	return nil
}

// stageExchangeLocked stages RenameExchange: the two entries swap
// inodes, and a directory swapped for a file moves a link count.
// Precondition: the Inode.mu of r's inodes are held.
func (c *change) stageExchangeLocked(r *renameOp, st *renameStage, now int64) {
	mover, target := r.mover, r.target
	c.replaceEntryLocked(r.src, r.name, target.Ino, r.te.typ)
	c.replaceEntryLocked(r.dst, r.newName, mover.Ino, r.me.typ)
	td := target.d
	td.Ctime = now
	if r.src != r.dst && mover.IsDir() != target.IsDir() {
		if mover.IsDir() { // a directory moves src -> dst, a file the other way
			st.sd.Nlink--
			st.dd.Nlink++
			st.nsubSrc, st.nsubDst = -1, 1
		} else {
			st.sd.Nlink++
			st.dd.Nlink--
			st.nsubSrc, st.nsubDst = 1, -1
		}
	}
	c.putInode(target, td)
	src, dst := r.src, r.dst
	c.after = append(c.after, func() {
		if mover.IsDir() {
			mover.parent = dst.Ino
		}
		if target.IsDir() {
			target.parent = src.Ino
		}
	})
}

// stageMoveLocked stages a plain rename: newName names the mover (the
// target, if any, loses that link), and name goes or becomes a whiteout.
// Precondition: the Inode.mu of r's inodes are held.
func (fs *FS) stageMoveLocked(c *change, r *renameOp, st *renameStage, cl Caller, now int64) error {
	mover, dst := r.mover, r.dst
	if r.exists {
		c.replaceEntryLocked(dst, r.newName, mover.Ino, r.me.typ)
		td := r.target.d
		if r.target.IsDir() {
			st.dd.Nlink--
			st.nsubDst--
		}
		c.stageDropLinkLocked(r.target, &td, now)
	} else if err := c.addEntryLocked(dst, st.dd, r.newName, mover.Ino, r.me.typ); err != nil {
		return err
	}
	if r.flags&RenameWhiteout != 0 {
		var err error
		if st.wo, err = fs.stageWhiteoutLocked(c, r.src, r.name, cl); err != nil {
			return err
		}
	} else {
		c.removeEntryLocked(r.src, r.name)
	}
	if mover.IsDir() && r.src != dst {
		st.sd.Nlink--
		st.dd.Nlink++
		st.nsubSrc--
		st.nsubDst++
	}
	if mover.IsDir() {
		c.after = append(c.after, func() { mover.parent = dst.Ino })
	}
	return nil
}

// stageWhiteoutLocked stages a whiteout, a character device 0:0 with
// mode 0 owned by cl, in place of dir's entry name (the kernel's
// WHITEOUT_MODE and WHITEOUT_DEV), and returns its inode, to be published
// once the change commits (or its number put back if it does not).
// Precondition: dir.mu is held.
func (fs *FS) stageWhiteoutLocked(c *change, dir *Inode, name string, cl Caller) (*Inode, error) {
	uid, gid := cl.fsIDs() // a rename request may carry no ids (NoID)
	ino, d, acl, err := fs.newInodeLocked(dir, NewInode{Mode: format.ModeChr, UID: uid, GID: gid})
	if err != nil {
		return nil, err
	}
	wo := &Inode{fs: fs, Ino: ino, typ: format.ModeChr}
	if acl != nil {
		if err := c.stageXattrsLocked(wo, &d, acl); err != nil {
			fs.putBackIno(ino)
			return nil, err
		}
	}
	c.replaceEntryLocked(dir, name, ino, format.DTOf(format.ModeChr))
	c.putInode(wo, d)
	return wo, nil
}
