package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/cluster"
	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
	"github.com/dnnfs/dnnfs/format"
)

// Options configure the FUSE layer.
type Options struct {
	Log *zap.Logger
	// ReadCache lets read-only opens use the kernel page cache
	// (FOPEN_KEEP_CACHE) instead of direct I/O.
	ReadCache bool
	// PageCache makes every open use the kernel page cache, so write(2)
	// and stores through a shared mapping of one file stay coherent as on
	// a local file system; the kernel then serialises writers of a file
	// (DESIGN.md, "The FUSE data path").
	PageCache bool
	// Tier is the SSD tier for embedding tables; nil without --ssd.
	Tier *embedding.Tier
	// Cluster makes the pool's regular files the cluster's (DESIGN.md
	// §Cluster); nil without --etcd, and then nothing changes.
	Cluster *cluster.Node
}

// maxPayload is the most data a READ or WRITE request carries from a
// buffer that starts on a page: 1 MiB (256 pages, the kernel's default
// fs.fuse.max_pages_limit); larger requests (with the limit raised) did
// not measure faster (DESIGN.md, "The FUSE data path").
const maxPayload = 1 << 20

// MaxRequest is the largest READ or WRITE request a mount asks the kernel
// for: maxPayload plus one page, or less where the kernel allows fewer
// pages per request (fs.fuse.max_pages_limit; go-fuse clamps MaxWrite the
// same way). The extra page is for buffers that do not start on a page
// (fio's, a Python bytes object's, glibc's large malloc blocks 16 bytes
// into their first page): a 1 MiB read(2) or write(2) from one spans 257
// pages, and with 256 the kernel sends it as two requests, 1 MiB less the
// buffer's offset in its page and then the rest (README, "Tuning").
func MaxRequest() int {
	ps := os.Getpagesize()
	return min(maxPayload+ps, maxPagesLimit()*ps)
}

// maxPagesLimit is the kernel's fs.fuse.max_pages_limit.
func maxPagesLimit() int {
	pages := 256 // the kernel's limit before the sysctl existed (Linux 4.20 to 6.12)
	if b, err := os.ReadFile("/proc/sys/fs/fuse/max_pages_limit"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			pages = n
		}
	}
	return pages
}

// SplitsUnaligned reports whether this kernel sends a 1 MiB read(2) or
// write(2) from a buffer not starting on a page as two requests (see
// MaxRequest): the mount logs how to lift it.
func SplitsUnaligned() (limit int, split bool) {
	limit = maxPagesLimit()
	return limit, limit*os.Getpagesize() < maxPayload+os.Getpagesize()
}

// maxRequest is MaxRequest when the first mount of this process asked.
var maxRequest = sync.OnceValue(MaxRequest)

// SetReadAhead sets the read-ahead window of the mount on mnt to the
// largest request (MaxRequest). Reads through the page cache (read-only
// opens with --read-cache, and mmap of any file) are sent as read-ahead,
// whose window is the kernel's 128 KiB default: a 1 MiB read(2) became
// eight 128 KiB requests and a sequential mmap read ran about 8x slower
// (DESIGN.md, "FUSE data path"). The FUSE INIT reply can only lower the
// window, so it is raised afterwards through the mount's backing device
// in sysfs, which needs root; direct-I/O opens have no read-ahead.
func SetReadAhead(mnt string) error {
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		return err
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(p, []byte(strconv.Itoa(MaxRequest()>>10)), 0)
}

// node is what the go-fuse node of every pool inode has, whatever its
// kind: attributes (Getattr, Statx, Setattr), extended attributes (real
// and virtual, status.go) and statfs, which the kernel sends for any
// inode. Each kind's node embeds it and adds only the operations the
// kernel sends to that kind: a directory has no Open, Read or Write, a
// symlink only Readlink, a FIFO, socket or device node nothing more (the
// kernel serves their opens itself). A request a node has no method for
// would get go-fuse's default answer (mostly ENOTSUP); the VFS refuses
// such requests for the wrong kind before they reach FUSE.
//
// A node's kind is its inode's and never changes: newNode picks the type
// from the mode type, which is part of the node's StableAttr, so go-fuse's
// reuse of a known node for the same (ino, gen, type) always returns one
// of the right type (an inode number reused later has a new generation).
type node struct {
	gofs.Inode
	p    *core.FS
	in   *core.Inode
	opts *Options
}

// dirNode is a directory: names (lookup, create, link, unlink, rename)
// and listings (OpendirHandle); the root is one, so it also resolves file
// handles (export.go).
type dirNode struct{ node }

// fileNode is a regular file: open, data and its handles. An embedding
// table is a regular file too (it becomes one by setxattr on the file,
// maybe while open, and go-fuse keeps a node's operations for its life),
// so its data operations branch to table.go.
type fileNode struct{ node }

// invalidate drops the kernel's cached attributes of the node and, from
// off on, its cached pages (off -1: attributes only, which takes no page
// lock and so is safe while the kernel holds the inode for the request
// being answered). Its failure needs no handling: ENOENT means the kernel
// no longer caches the node, and anything else leaves entries that
// expire with the mount's one-second attribute timeout.
func (n *node) invalidate(off int64) {
	_ = n.NotifyContent(off, 0)
}

// symlinkNode is a symbolic link.
type symlinkNode struct{ node }

// specialNode is a FIFO, socket or character or block device: the pool
// keeps only its attributes, type and rdev.
type specialNode struct{ node }

// What every kind answers (node's methods).
var (
	_ = (gofs.NodeGetattrer)((*node)(nil))
	_ = (gofs.NodeStatxer)((*node)(nil))
	_ = (gofs.NodeSetattrer)((*node)(nil))
	_ = (gofs.NodeIoctler)((*node)(nil)) // file attributes (attrflags.go)
	_ = (gofs.NodeStatfser)((*node)(nil))
	_ = (gofs.NodeGetxattrer)((*node)(nil))
	_ = (gofs.NodeSetxattrer)((*node)(nil))
	_ = (gofs.NodeListxattrer)((*node)(nil))
	_ = (gofs.NodeRemovexattrer)((*node)(nil))
)

// What each kind adds (nodes_test.go checks that it is nothing else).
var (
	_ = (gofs.NodeLookuper)((*dirNode)(nil))
	_ = (gofs.NodeCreater)((*dirNode)(nil))
	_ = (gofs.NodeTmpfiler)((*dirNode)(nil))
	_ = (gofs.NodeMknoder)((*dirNode)(nil))
	_ = (gofs.NodeMkdirer)((*dirNode)(nil))
	_ = (gofs.NodeSymlinker)((*dirNode)(nil))
	_ = (gofs.NodeLinker)((*dirNode)(nil))
	_ = (gofs.NodeUnlinker)((*dirNode)(nil))
	_ = (gofs.NodeRmdirer)((*dirNode)(nil))
	_ = (gofs.NodeRenamer)((*dirNode)(nil))
	_ = (gofs.NodeOpendirHandler)((*dirNode)(nil))

	_ = (gofs.NodeOpener)((*fileNode)(nil))
	_ = (gofs.NodeReader)((*fileNode)(nil))
	_ = (gofs.NodeWriter)((*fileNode)(nil))
	_ = (gofs.NodeFsyncer)((*fileNode)(nil))
	_ = (gofs.NodeFlusher)((*fileNode)(nil))
	_ = (gofs.NodeReleaser)((*fileNode)(nil))
	_ = (gofs.NodeAllocater)((*fileNode)(nil))
	_ = (gofs.NodeLseeker)((*fileNode)(nil))

	_ = (gofs.NodeReadlinker)((*symlinkNode)(nil))

	_ = (gofs.InodeEmbedder)((*specialNode)(nil))
)

// newNode returns the node for in, of the type its kind (mode type) asks.
func newNode(p *core.FS, in *core.Inode, kind uint32, opts *Options) gofs.InodeEmbedder {
	switch kind {
	case format.ModeDir:
		return &dirNode{node{p: p, in: in, opts: opts}}
	case format.ModeReg:
		return &fileNode{node{p: p, in: in, opts: opts}}
	case format.ModeLnk:
		return &symlinkNode{node{p: p, in: in, opts: opts}}
	}
	return &specialNode{node{p: p, in: in, opts: opts}}
}

// poolInode is the pool inode behind a node of any kind; request files
// (table.go) are not pool inodes and do not have it.
func (n *node) poolInode() *core.Inode { return n.in }

// Root returns the root node for Mount.
func Root(p *core.FS, opts Options) gofs.InodeEmbedder {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	return &dirNode{node{p: p, in: p.Root(), opts: &opts}}
}

// MountOptions returns the go-fuse options dnnfs mounts with.
func MountOptions(poolPath string, allowOther bool, log *zap.Logger) *gofs.Options {
	sec := time.Second
	zero := time.Duration(0)
	return &gofs.Options{
		MountOptions: fuse.MountOptions{
			FsName:     poolPath,
			Name:       "dnnfs",
			MaxWrite:   maxRequest(),
			AllowOther: allowOther,
			// Permission checks by the kernel from our mode bits.
			Options:       []string{"default_permissions"},
			DirectMount:   true,
			MaxBackground: 64,
			// Shared mmap of direct-I/O files (kernel >= 6.6); the ACL
			// setgid rule reaches the daemon, and the umask is applied
			// by NewRawFS, which every mount goes through (acl.go); file
			// handles that outlive the kernel's inode cache (export.go).
			ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP | fuse.CAP_SETXATTR_EXT | fuse.CAP_DONT_MASK |
				fuse.CAP_EXPORT_SUPPORT,
			DisableXAttrs: false,
			// POSIX ACLs, checked by the kernel.
			EnableAcl: true,
			// ID-mapped mounts (mount_setattr MOUNT_ATTR_IDMAP) where the
			// kernel allows them: permissions are the kernel's
			// (default_permissions), and a request that creates an inode
			// carries the mapped ids. Any other request then carries no
			// ids (core.NoID); core reads the caller's from /proc where
			// it needs them.
			IDMappedMount: true,
		},
		EntryTimeout:    &sec,
		AttrTimeout:     &sec,
		NegativeTimeout: &zero,
		RootStableAttr:  &gofs.StableAttr{Ino: uint64(format.RootIno), Gen: 1},
		// Modes as stored: go-fuse would show a mode-0000 file as 0644.
		NullPermissions: true,
		// Node ID = inode number, so file handles resolve (export.go).
		ExternalNodeID: true,
	}
}

// child returns the node for in, an inode this directory's operation
// hands the kernel, with its attributes in out.
func (n *dirNode) child(ctx context.Context, in *core.Inode, out *fuse.EntryOut) *gofs.Inode {
	a := in.Attr()
	fillAttr(&a, &out.Attr)
	kind := a.Mode & format.ModeType
	return n.NewInode(ctx, newNode(n.p, in, kind, n.opts), gofs.StableAttr{Mode: kind, Ino: uint64(a.Ino), Gen: a.Gen})
}

func fillAttr(a *core.Attr, out *fuse.Attr) {
	out.Ino = uint64(a.Ino)
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Rdev = a.Rdev
	out.Uid, out.Gid = a.UID, a.GID
	out.Size = a.Size
	out.Blocks = a.Blocks
	out.Blksize = format.BlockSize
	out.SetTimes(&a.Atime, &a.Mtime, &a.Ctime)
}

func caller(ctx context.Context) (uid, gid uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

// callerOf is the pool's view of a FUSE request: its context (ended on
// FUSE_INTERRUPT), the calling thread's id and its fsuid/fsgid from the
// request header.
func callerOf(ctx context.Context) core.Caller {
	c := core.Caller{Ctx: ctx}
	if fc, ok := fuse.FromContext(ctx); ok {
		c.TID, c.UID, c.GID = fc.Pid, fc.Uid, fc.Gid
	}
	return c
}

func (n *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	in, err := n.p.Lookup(n.in, name)
	if errors.Is(err, core.ErrNotFound) {
		if ch, ok := n.lookupChild(ctx, name, out); ok {
			return ch, 0
		}
		if n.opts.Cluster != nil {
			in, err = n.opts.Cluster.Lookup(ctx, n.in, name) // committed on another node
		}
	}
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, in, out), 0
}

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	a := n.in.Attr()
	fillAttr(&a, &out.Attr)
	return 0
}

// Statx is Getattr plus the birth time (FUSE_STATX): the kernel asks
// for it when a statx(2) caller wants STATX_BTIME. An inode made before
// birth times were kept has none, and the mask says so.
func (n *node) Statx(ctx context.Context, fh gofs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	a := n.in.Attr()
	var attr fuse.Attr
	fillAttr(&a, &attr)
	fillStatx(&attr, a.Btime, &out.Statx)
	return 0
}

// fillStatx converts attributes to a statx reply: the basic stats, and
// STATX_BTIME when btime is known.
func fillStatx(a *fuse.Attr, btime time.Time, out *fuse.Statx) {
	out.Mask = unix.STATX_BASIC_STATS
	out.Blksize = a.Blksize
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.Uid, a.Gid
	out.Mode = uint16(a.Mode)
	out.Ino = a.Ino
	out.Size = a.Size
	out.Blocks = a.Blocks
	out.Atime = fuse.SxTime{Sec: a.Atime, Nsec: a.Atimensec}
	out.Mtime = fuse.SxTime{Sec: a.Mtime, Nsec: a.Mtimensec}
	out.Ctime = fuse.SxTime{Sec: a.Ctime, Nsec: a.Ctimensec}
	out.RdevMajor, out.RdevMinor = unix.Major(uint64(a.Rdev)), unix.Minor(uint64(a.Rdev))
	if !btime.IsZero() {
		out.Mask |= unix.STATX_BTIME
		out.Btime = fuse.SxTime{Sec: uint64(btime.Unix()), Nsec: uint32(btime.Nanosecond())}
	}
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var sa core.SetAttr
	if m, ok := in.GetMode(); ok {
		sa.Mode = &m
	}
	if u, ok := in.GetUID(); ok {
		sa.UID = &u
	}
	if g, ok := in.GetGID(); ok {
		sa.GID = &g
	}
	if t, ok := in.GetATime(); ok {
		sa.Atime = &t
	}
	if t, ok := in.GetMTime(); ok {
		sa.Mtime = &t
	}
	var oldSize int64 // for the cluster: a size change is a change to commit
	if s, ok := in.GetSize(); ok {
		sa.Size = &s
		if n.opts.Cluster != nil {
			oldSize = int64(n.in.Attr().Size)
		}
	}
	// utimes(2) with no times (each time set is "now"): the caller needs
	// write access, not ownership, and an append-only file allows it.
	atime, mtime := in.Valid&fuse.FATTR_ATIME != 0, in.Valid&fuse.FATTR_MTIME != 0
	sa.TimesNow = (atime || mtime) && (!atime || in.Valid&fuse.FATTR_ATIME_NOW != 0) &&
		(!mtime || in.Valid&fuse.FATTR_MTIME_NOW != 0)
	var before core.Attr // for the cluster: restored when the namespace refuses the change
	if n.opts.Cluster != nil {
		before = n.in.Attr()
	}
	set := func() error { return n.p.SetattrAs(callerOf(ctx), n.in, sa) }
	var err error
	switch {
	case sa.Size != nil && in.Valid&fuse.FATTR_FH == 0:
		// truncate(2): a shared file's new size is committed now.
		err = n.opts.Cluster.Truncate(ctx, n.in, int64(*sa.Size), set)
	case sa.Size != nil:
		if err = set(); err == nil {
			n.opts.Cluster.Resized(n.in, oldSize, int64(*sa.Size))
		}
	default:
		err = set()
	}
	if err != nil {
		return n.fail("setattr", err)
	}
	if sa.Mode != nil || sa.UID != nil || sa.GID != nil || sa.Mtime != nil || sa.TimesNow && mtime {
		// chmod, chown and utimes of a shared file reach the other nodes
		// now, or not at all (DESIGN.md §Cluster).
		if err := n.opts.Cluster.MetaChanged(ctx, n.in); err != nil {
			mode := before.Mode & format.ModePerm
			_ = n.p.Setattr(n.in, core.SetAttr{Mode: &mode, UID: &before.UID, GID: &before.GID, Mtime: &before.Mtime})
			return n.fail("setattr", err)
		}
	}
	a := n.in.Attr()
	fillAttr(&a, &out.Attr)
	return 0
}

// fail logs an unexpected error (not a plain ENOENT/EEXIST answer) and
// maps it.
func (n *node) fail(op string, err error) syscall.Errno {
	e := errno(err)
	if e == syscall.EIO {
		n.opts.Log.Error("operation failed", zap.String("op", op), zap.Uint64("ino", uint64(n.in.Ino)), zap.Error(err))
	}
	return e
}

func (n *dirNode) create(ctx context.Context, name string, mode uint32, target string, rdev uint32, out *fuse.EntryOut) (*gofs.Inode, *core.Inode, syscall.Errno) {
	uid, gid := caller(ctx)
	var in *core.Inode
	err := n.p.RetryNoSpace(func() (err error) {
		in, err = n.p.Create(n.in, name, core.NewInode{Mode: mode, UID: uid, GID: gid, Target: target, Rdev: rdev})
		return err
	})
	if err != nil {
		return nil, nil, n.fail("create", err)
	}
	return n.child(ctx, in, out), in, 0
}

func (n *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	ch, in, e := n.create(ctx, name, format.ModeReg|mode&format.ModePerm, "", 0, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	cl, err := n.opts.Cluster.Open(ctx, in, true, true) // a new file: its writer lock
	if err != nil {
		_ = n.p.Unlink(n.in, name)
		return nil, nil, 0, n.fail("create", err)
	}
	fh, fl := n.open(in, flags)
	fh.(*handle).cl = cl
	return ch, fh, fl, 0
}

// Tmpfile answers open(2) with O_TMPFILE: an open file with no name, which
// linkat(2) through /proc/self/fd can name later.
func (n *dirNode) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	uid, gid := caller(ctx)
	in, err := n.p.CreateTmpfile(n.in, core.NewInode{Mode: format.ModeReg | mode&format.ModePerm, UID: uid, GID: gid})
	if err != nil {
		return nil, nil, 0, n.fail("tmpfile", err)
	}
	fh, fl := n.open(in, flags)
	return n.child(ctx, in, out), fh, fl, 0
}

// Mknod makes regular files, FIFOs, sockets and device nodes. The kernel
// serves the special ones itself (pipes, bound sockets, and devices, which
// a nodev mount refuses to open): dnnfs only stores their type and rdev.
func (n *dirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	switch mode & format.ModeType {
	case format.ModeReg, format.ModeFifo, format.ModeSock:
		dev = 0
	case format.ModeChr, format.ModeBlk:
	default:
		return nil, syscall.EINVAL // mknod(2) of a directory or unknown type; the VFS refuses these first
	}
	ch, _, e := n.create(ctx, name, mode&(format.ModeType|format.ModePerm), "", dev, out)
	return ch, e
}

func (n *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ch, _, e := n.create(ctx, name, format.ModeDir|mode&format.ModePerm, "", 0, out)
	return ch, e
}

func (n *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ch, in, e := n.create(ctx, name, format.ModeLnk|0o777, target, 0, out)
	if e != 0 {
		return nil, e
	}
	// A cluster mount shares the link (DESIGN.md §Cluster): everywhere or,
	// when the namespace refuses it, nowhere.
	if err := n.opts.Cluster.Symlinked(ctx, n.in, name, in); err != nil {
		_ = n.p.Unlink(n.in, name)
		return nil, n.fail("symlink", err)
	}
	return ch, 0
}

func (n *dirNode) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	t, ok := target.(interface{ poolInode() *core.Inode })
	if !ok {
		return nil, syscall.EXDEV // a request file
	}
	in := t.poolInode()
	if err := n.p.RetryNoSpace(func() error { return n.p.Link(in, n.in, name) }); err != nil {
		return nil, n.fail("link", err)
	}
	return n.child(ctx, in, out), 0
}

func (n *symlinkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	s, err := n.p.Readlink(n.in)
	if err != nil {
		return nil, n.fail("readlink", err)
	}
	n.p.Accessed(n.in)
	return []byte(s), 0
}

func (n *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	// A cluster file's name goes from the namespace first: a failed
	// transaction leaves both (DESIGN.md §Cluster).
	return n.fail("unlink", n.opts.Cluster.Unlink(ctx, n.in, name, func() error { return n.p.Unlink(n.in, name) }))
}

func (n *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.fail("rmdir", n.p.Rmdir(n.in, name))
}

func (n *dirNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EXDEV
	}
	// The namespace first: a failed transaction leaves both.
	return n.fail("rename", n.opts.Cluster.Rename(ctx, n.in, name, np.in, newName, func() error {
		return n.p.RenameAs(callerOf(ctx), n.in, name, np.in, newName, flags)
	}))
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	// A file unlinked just before is freed by the FORGET the kernel sends
	// after the unlink; `rm f; df` must see its space (core.WaitForgets).
	n.p.WaitForgets()
	s := n.p.Statfs()
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Free, s.Avail
	out.Files, out.Ffree = s.Files, s.FFree
	out.Bsize, out.Frsize = s.BlockSize, s.BlockSize
	out.NameLen = s.NameLen
	return 0
}

// ---------------------------------------------------------------------
// Extended attributes

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	v, ok := n.virtualXattr(attr)
	if !ok && (attr == XattrSession || attr == XattrTable || attr == XattrWarmup) {
		return 0, syscall.ENODATA // no session open, not a table, not a cluster file
	}
	if !ok {
		var err error
		if v, err = n.p.Getxattr(n.in, attr); err != nil {
			return 0, errno(err)
		}
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	switch attr {
	case XattrTable:
		return n.setTable(data)
	case XattrMigrate:
		return n.migrate(data)
	case XattrAttach:
		if !n.in.IsDir() {
			return syscall.ENOTDIR
		}
		k, err := n.opts.Cluster.Attach(ctx, n.in, string(data))
		if err != nil {
			return n.fail("attach", err)
		}
		n.opts.Log.Info("attached", zap.String("source", string(data)), zap.Int("objects", k))
		return 0
	case XattrWarmup:
		i, err := strconv.ParseInt(strings.TrimPrefix(string(data), "chunk="), 10, 64)
		if err != nil || !strings.HasPrefix(string(data), "chunk=") {
			return syscall.EINVAL
		}
		if err := n.opts.Cluster.Warm(ctx, n.in, i); err != nil {
			if errors.Is(err, cluster.ErrNotShared) {
				return syscall.ENODATA
			}
			return n.fail("warm-up", err)
		}
		return 0
	case XattrStatus:
		// 'reset' on the root clears the SSD tier's latency histograms
		// and counters (benchmarks measure one phase at a time).
		if string(data) == "reset" && n.in.Ino == n.p.Root().Ino && n.opts.Tier != nil {
			n.opts.Tier.ResetStats()
			return 0
		}
		return syscall.EPERM
	}
	if attr == XattrSession {
		threads, size, mode, err := parseSession(string(data))
		if err != nil {
			n.opts.Log.Warn("bad session request", zap.Uint64("ino", uint64(n.in.Ino)), zap.String("value", string(data)), zap.Error(err))
			return syscall.EINVAL
		}
		if e := n.fail("start session", n.p.StartSession(n.in, threads, size, mode)); e != 0 {
			return e
		}
		// The size changed behind the kernel's attribute cache. Notify
		// from another goroutine: the kernel may hold the inode while it
		// waits for this reply.
		go n.invalidate(0)
		return 0
	}
	if _, ok := n.virtualXattr(attr); ok || attr == cluster.XattrState {
		return syscall.EPERM // computed, not stored; or the cluster's own
	}
	kill := flags&setxattrKillSGID != 0
	flags &^= setxattrKillSGID
	if isACLXattr(attr) {
		return n.fail("set ACL", n.p.RetryNoSpace(func() error { return n.p.SetACL(n.in, attr, data, kill) }))
	}
	return n.fail("setxattr", n.p.RetryNoSpace(func() error { return n.p.Setxattr(n.in, attr, data, flags) }))
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if attr == XattrTable {
		return syscall.EPERM // a table stays a table; delete the file instead
	}
	if attr == XattrSession {
		return n.fail("abandon session", n.p.AbandonSession(n.in))
	}
	if attr == cluster.XattrState {
		return syscall.EPERM
	}
	return n.fail("removexattr", n.p.Removexattr(n.in, attr))
}

// Listxattr lists the names from one snapshot: sizing against one and
// copying another would write past the kernel's buffer when a setxattr
// lands between the two.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	names := n.p.Listxattr(n.in)
	var size int
	for _, name := range names {
		size += len(name) + 1
	}
	if len(dest) < size {
		return uint32(size), syscall.ERANGE
	}
	p := 0
	for _, name := range names {
		p += copy(dest[p:], name)
		dest[p] = 0
		p++
	}
	return uint32(p), 0
}
