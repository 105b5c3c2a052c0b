package core

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/lock"
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
	unlock, err := fs.lockWhole(in)
	if err != nil {
		return err
	}
	defer unlock()
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
// Precondition: in.mu is held.
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
