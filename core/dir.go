package core

import (
	"fmt"
	"strings"
	"time"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/recovery"
)

// dirIndex is the DRAM index of a directory's entry slots.
type dirIndex struct {
	names    map[string]dirEntry
	slots    []string // slot -> name; "" = free
	freeHint uint64   // no free slot below this
	nsub     uint32   // subdirectories (for nlink)
}

type dirEntry struct {
	ino  Ino
	slot uint64
	typ  uint8
}

func newDirIndex() *dirIndex { return &dirIndex{names: map[string]dirEntry{}} }

// loadDir builds a directory's index at mount from its used slots
// (recovery.Mount read and checked them).
func (fs *FS) loadDir(in *Inode, entries []recovery.Entry) {
	in.dir = newDirIndex()
	in.dir.slots = make([]string, in.d.Size/format.BlockSize*format.DirentsPerBlock)
	for _, e := range entries {
		in.dir.names[e.Name] = dirEntry{ino: e.Ino, slot: e.Slot, typ: e.Type}
		in.dir.slots[e.Slot] = e.Name
		if child := fs.inodes[e.Ino]; child != nil && child.IsDir() {
			in.dir.nsub++
		}
	}
}

// slotOffLocked is the pool byte offset of directory slot s.
func (in *Inode) slotOffLocked(s uint64) (format.Off, bool) {
	lo := format.DirentOff(s)
	phys, _, ok := in.lookupLocked(lo / format.BlockSize)
	if !ok {
		return 0, false
	}
	return phys.Off() + format.Off(lo%format.BlockSize), true
}

func checkName(name string) error {
	if len(name) > format.MaxNameLen {
		return ErrNameTooLong
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return ErrInvalid
	}
	return nil
}

// addEntryLocked stages a new entry in dir (whose staged inode is nd).
// Precondition: dir.mu is held.
func (c *change) addEntryLocked(dir *Inode, nd *format.Inode, name string, ino Ino, typ uint8) error {
	x := dir.dir
	s := x.freeHint
	for s < uint64(len(x.slots)) && x.slots[s] != "" {
		s++
	}
	grow := s == uint64(len(x.slots))
	if grow {
		// A new directory block, zeroed (all slots free) before it is
		// linked in by the commit.
		nblocks := nd.Size / format.BlockSize
		goal := dir.goalLocked(nblocks)
		if goal == 0 {
			goal = c.fs.sb.DataStart
		}
		b, err := c.allocMeta(goal, 1)
		if err != nil {
			return err
		}
		if err := zeroRange(c.fs.m, int64(b.Off()), format.BlockSize); err != nil {
			return ioErr("clearing a new directory block", err)
		}
		if err := c.fs.materialize(b, 1); err != nil {
			return err
		}
		exts := mergeExtents(dir.exts, []format.Extent{{Logical: nblocks, Phys: b, Len: 1}})
		// Later entries in this change must see the new block.
		old := dir.exts
		c.undo = append(c.undo, func() { dir.exts = old })
		dir.exts = exts
		if err := c.putExtentsLocked(dir, nd, exts); err != nil {
			return err
		}
		nd.Size += format.BlockSize
	}
	off, ok := dir.slotOffLocked(s)
	if !ok {
		return fmt.Errorf("%w: directory %d slot %d unmapped", format.ErrCorrupt, dir.Ino, s)
	}
	de := format.Dirent{Name: name, Type: typ, Ino: ino}
	var buf [format.DirentSize]byte
	de.Encode(buf[:])
	c.tx.Write(off, buf[:])
	// Reserve the slot in DRAM now so a second entry in the same change
	// takes another one; abort undoes it.
	if grow {
		x.slots = append(x.slots, make([]string, format.DirentsPerBlock)...)
	}
	x.slots[s] = name
	x.freeHint = s + 1
	x.names[name] = dirEntry{ino: ino, slot: s, typ: typ}
	c.undo = append(c.undo, func() {
		delete(x.names, name)
		x.slots[s] = ""
		if grow {
			x.slots = x.slots[:len(x.slots)-format.DirentsPerBlock]
		}
		x.freeHint = min(x.freeHint, s)
	})
	return nil
}

// removeEntryLocked stages the removal of name from dir.
// Precondition: dir.mu is held.
func (c *change) removeEntryLocked(dir *Inode, name string) {
	x := dir.dir
	e := x.names[name]
	off, _ := dir.slotOffLocked(e.slot)
	var zero [format.DirentSize]byte
	c.tx.Write(off, zero[:])
	delete(x.names, name)
	x.slots[e.slot] = ""
	x.freeHint = min(x.freeHint, e.slot)
	c.undo = append(c.undo, func() { x.names[name] = e; x.slots[e.slot] = name })
}

// replaceEntryLocked stages name in dir pointing at ino instead.
// Precondition: dir.mu is held.
func (c *change) replaceEntryLocked(dir *Inode, name string, ino Ino, typ uint8) {
	x := dir.dir
	e := x.names[name]
	off, _ := dir.slotOffLocked(e.slot)
	de := format.Dirent{Name: name, Type: typ, Ino: ino}
	var buf [format.DirentSize]byte
	de.Encode(buf[:])
	c.tx.Write(off, buf[:])
	x.names[name] = dirEntry{ino: ino, slot: e.slot, typ: typ}
	c.undo = append(c.undo, func() { x.names[name] = e })
}

// lookupLocked finds name in directory dir: its inode (nil if not live)
// and entry.
// Precondition: dir.mu is held.
func (fs *FS) lookupLocked(dir *Inode, name string) (*Inode, dirEntry, bool) {
	e, ok := dir.dir.names[name]
	if !ok {
		return nil, e, false
	}
	return fs.Inode(e.ino), e, true
}

// Lookup finds name in dir.
func (fs *FS) Lookup(dir *Inode, name string) (*Inode, error) {
	if len(name) > format.MaxNameLen {
		return nil, ErrNameTooLong
	}
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if dir.dir == nil {
		return nil, ErrNotDir
	}
	in, _, ok := fs.lookupLocked(dir, name)
	if !ok || in == nil {
		return nil, ErrNotFound
	}
	return in, nil
}

// Parent returns a directory's parent (the root is its own parent).
func (fs *FS) Parent(dir *Inode) *Inode {
	dir.mu.Lock()
	p := dir.parent
	dir.mu.Unlock()
	return fs.Inode(p)
}

// NewInode describes a file to create.
type NewInode struct {
	Mode     uint32 // type and permission bits
	UID, GID uint32
	Target   string // symlinks
	Rdev     uint32 // character and block devices
}

// Create makes a new file, directory, symlink, FIFO, socket or device
// node named name in dir.
func (fs *FS) Create(dir *Inode, name string, ni NewInode) (*Inode, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	typ := ni.Mode & format.ModeType
	switch typ {
	case format.ModeReg, format.ModeDir, format.ModeFifo, format.ModeSock:
		ni.Rdev = 0
	case format.ModeChr, format.ModeBlk:
	case format.ModeLnk:
		if len(ni.Target) == 0 || len(ni.Target) >= format.BlockSize {
			return nil, ErrNameTooLong
		}
	default:
		return nil, ErrNotSupp
	}
	fs.nsMu.Lock()
	defer fs.nsMu.Unlock()
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if dir.dir == nil {
		return nil, ErrNotDir
	}
	if dir.d.Nlink == 0 {
		return nil, ErrNotFound // creating in a removed directory
	}
	if _, _, ok := fs.lookupLocked(dir, name); ok {
		return nil, ErrExist
	}
	if err := dir.checkChangeLocked(); err != nil {
		return nil, err
	}
	ino, d, acl, err := fs.newInodeLocked(dir, ni)
	if err != nil {
		return nil, err
	}
	now := d.Ctime
	child := &Inode{fs: fs, Ino: ino, typ: typ}
	c := fs.begin()
	nd := dir.d
	nd.Mtime, nd.Ctime = now, now
	if typ == format.ModeDir {
		d.Nlink = 2
		nd.Nlink++
		child.dir = newDirIndex()
		child.parent = dir.Ino
	}
	if typ == format.ModeLnk {
		b, err := c.allocMeta(fs.sb.DataStart, 1)
		if err != nil {
			c.abort()
			fs.putBackIno(ino)
			return nil, err
		}
		buf := fs.m.Bytes()[b.Off() : b.Off()+format.BlockSize]
		clear(buf[copy(buf, ni.Target):])
		if err := fs.m.Persist(int64(b.Off()), format.BlockSize); err != nil {
			c.abort()
			fs.putBackIno(ino)
			return nil, ioErr("writing a symlink target", err)
		}
		d.Size = uint64(len(ni.Target))
		if err := c.putExtentsLocked(child, &d, []format.Extent{{Logical: 0, Phys: b, Len: 1}}); err != nil {
			c.abort()
			fs.putBackIno(ino)
			return nil, err
		}
	}
	if acl != nil {
		if err := c.stageXattrsLocked(child, &d, acl); err != nil {
			c.abort()
			fs.putBackIno(ino)
			return nil, err
		}
	}
	if err := c.addEntryLocked(dir, &nd, name, ino, format.DTOf(ni.Mode)); err != nil {
		c.abort()
		fs.putBackIno(ino)
		return nil, err
	}
	c.putInode(child, d)
	c.putInode(dir, nd)
	if err := c.commit(); err != nil {
		fs.putBackIno(ino)
		return nil, err
	}
	if typ == format.ModeDir {
		dir.dir.nsub++
	}
	fs.imu.Lock()
	fs.inodes[ino] = child
	fs.imu.Unlock()
	return child, nil
}

// newInodeLocked takes an inode number for a new child of dir and
// returns its first persistent state (one link) and the ACLs it inherits:
// setgid directories pass their group on (and, to subdirectories, the
// bit), a default ACL its entries (inheritACLLocked).
// Precondition: dir.mu is held.
func (fs *FS) newInodeLocked(dir *Inode, ni NewInode) (Ino, format.Inode, []format.Xattr, error) {
	if dir.d.Mode&0o2000 != 0 {
		ni.GID = dir.d.GID
		if ni.Mode&format.ModeType == format.ModeDir {
			ni.Mode |= 0o2000
		}
	}
	var acl []format.Xattr
	ni.Mode, acl = inheritACLLocked(dir, ni.Mode)
	ino, err := fs.newIno()
	if err != nil {
		return 0, format.Inode{}, nil, err
	}
	now := time.Now().UnixNano()
	return ino, format.Inode{Mode: ni.Mode, UID: ni.UID, GID: ni.GID, Nlink: 1, Gen: fs.genSeq,
		Atime: now, Mtime: now, Ctime: now, Btime: now, Rdev: ni.Rdev}, acl, nil
}

// stageDropLinkLocked stages one fewer link to child: freed now if no
// links, opens or kernel references remain, else kept (an orphan, on the
// persistent orphan set, until the last of them goes; see FreeIfUnused).
// Precondition: child.mu is held.
func (c *change) stageDropLinkLocked(child *Inode, nd *format.Inode, now int64) (freed bool) {
	if nd.Nlink > 0 {
		nd.Nlink--
	}
	if child.IsDir() {
		nd.Nlink = 0 // a removed directory has no links left, "." included
	}
	nd.Ctime = now
	if nd.Nlink > 0 || child.inUseLocked() {
		if nd.Nlink == 0 {
			nd.Flags |= format.InodeOrphan
		}
		c.putInode(child, *nd)
		return false
	}
	c.stageFreeInodeLocked(child)
	return true
}

// Unlink removes a non-directory entry; Rmdir an empty directory.
func (fs *FS) Unlink(dir *Inode, name string) error { return fs.remove(dir, name, false) }
func (fs *FS) Rmdir(dir *Inode, name string) error  { return fs.remove(dir, name, true) }

func (fs *FS) remove(dir *Inode, name string, wantDir bool) error {
	if len(name) > format.MaxNameLen {
		return ErrNameTooLong
	}
	fs.nsMu.Lock()
	defer fs.nsMu.Unlock()
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if dir.dir == nil {
		return ErrNotDir
	}
	if wantDir && name == "." {
		return ErrInvalid
	}
	if wantDir && name == ".." {
		return ErrNotEmpty
	}
	child, _, ok := fs.lookupLocked(dir, name)
	if !ok || child == nil {
		return ErrNotFound
	}
	child.mu.Lock()
	defer child.mu.Unlock()
	// may_delete's order: these before the kind of file and emptiness.
	if err := dir.checkRemoveLocked(); err != nil {
		return err
	}
	if err := child.checkRemoveLocked(); err != nil {
		return err
	}
	if wantDir && !child.IsDir() {
		return ErrNotDir
	}
	if !wantDir && child.IsDir() {
		return ErrIsDir
	}
	if wantDir && len(child.dir.names) > 0 {
		return ErrNotEmpty
	}
	now := time.Now().UnixNano()
	c := fs.begin()
	nd := dir.d
	nd.Mtime, nd.Ctime = now, now
	if wantDir {
		nd.Nlink--
	}
	c.removeEntryLocked(dir, name)
	cd := child.d
	c.stageDropLinkLocked(child, &cd, now)
	c.putInode(dir, nd)
	if err := c.commit(); err != nil {
		return err
	}
	if wantDir {
		dir.dir.nsub--
	}
	return nil
}

// Link adds name in dir for the existing non-directory target.
func (fs *FS) Link(target, dir *Inode, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if target.IsDir() {
		return ErrPerm // before any lock: Link(d, d) would lock d twice
	}
	fs.nsMu.Lock()
	defer fs.nsMu.Unlock()
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if dir.dir == nil {
		return ErrNotDir
	}
	if dir.d.Nlink == 0 {
		return ErrNotFound // linking into a removed directory
	}
	if _, _, ok := fs.lookupLocked(dir, name); ok {
		return ErrExist
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	if target.d.Nlink == 0 && !target.linkable {
		return ErrNotFound
	}
	if target.d.Nlink >= 65000 {
		return ErrLoop
	}
	if err := dir.checkChangeLocked(); err != nil {
		return err
	}
	if err := target.checkRemoveLocked(); err != nil {
		return err // vfs_link: no new names for immutable or append-only files
	}
	now := time.Now().UnixNano()
	c := fs.begin()
	nd := dir.d
	nd.Mtime, nd.Ctime = now, now
	if err := c.addEntryLocked(dir, &nd, name, target.Ino, format.DTOf(target.d.Mode)); err != nil {
		c.abort()
		return err
	}
	td := target.d
	td.Nlink++
	td.Flags &^= format.InodeOrphan // a tmpfile's first name
	td.Ctime = now
	c.putInode(target, td)
	c.putInode(dir, nd)
	if err := c.commit(); err != nil {
		return err
	}
	target.linkable = false
	return nil
}

// CreateTmpfile makes a regular file with no name, as open(2) with
// O_TMPFILE does: an orphan (nlink 0) from the start, so a crash frees it
// at the next mount, and Released frees it with its last handle unless
// Link gave it a name first. The caller must count its open (Opened).
func (fs *FS) CreateTmpfile(dir *Inode, ni NewInode) (*Inode, error) {
	if ni.Mode&format.ModeType != format.ModeReg {
		return nil, ErrInvalid
	}
	fs.nsMu.Lock() // serialises fs.genSeq with the other creators
	defer fs.nsMu.Unlock()
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if dir.dir == nil {
		return nil, ErrNotDir
	}
	if dir.d.Nlink == 0 {
		return nil, ErrNotFound
	}
	if err := dir.checkChangeLocked(); err != nil {
		return nil, err
	}
	ino, d, acl, err := fs.newInodeLocked(dir, ni)
	if err != nil {
		return nil, err
	}
	d.Nlink, d.Flags = 0, format.InodeOrphan
	child := &Inode{fs: fs, Ino: ino, typ: format.ModeReg, linkable: true}
	c := fs.begin()
	if acl != nil {
		if err := c.stageXattrsLocked(child, &d, acl); err != nil {
			c.abort()
			fs.putBackIno(ino)
			return nil, err
		}
	}
	c.putInode(child, d)
	if err := c.commit(); err != nil {
		fs.putBackIno(ino)
		return nil, err
	}
	fs.imu.Lock()
	fs.inodes[ino] = child
	fs.imu.Unlock()
	return child, nil
}

// DirEntry is one entry returned by ReadDir.
type DirEntry struct {
	Name string
	Ino  Ino
	Mode uint32 // file type bits only
	Next uint64 // position after this entry
}

// ReadDir returns the first entry at slot position pos or later. Slots
// never move, so an entry present for the whole listing is returned
// exactly once whatever else changes meanwhile.
func (fs *FS) ReadDir(dir *Inode, pos uint64) (DirEntry, bool) {
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if dir.dir == nil {
		return DirEntry{}, false
	}
	x := dir.dir
	for s := pos; s < uint64(len(x.slots)); s++ {
		if name := x.slots[s]; name != "" {
			e := x.names[name]
			return DirEntry{Name: name, Ino: e.ino, Mode: format.ModeOfDT(e.typ), Next: s + 1}, true
		}
	}
	return DirEntry{}, false
}

// Readlink returns a symlink's target.
func (fs *FS) Readlink(in *Inode) (string, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.d.IsSymlink() {
		return "", ErrInvalid
	}
	phys, _, ok := in.lookupLocked(0)
	if !ok || in.d.Size > format.BlockSize {
		return "", fmt.Errorf("%w: symlink %d has no target block", format.ErrCorrupt, in.Ino)
	}
	return string(fs.m.Bytes()[phys.Off() : phys.Off()+format.Off(in.d.Size)]), nil
}
