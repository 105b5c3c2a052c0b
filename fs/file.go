package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/cluster"
	"github.com/dnnfs/dnnfs/core"
)

// handle is an open file.
type handle struct {
	appendMode bool
	noAtime    bool            // O_NOATIME
	cl         *cluster.Handle // a cluster file's open (nil: local only, or no cluster)
}

func (n *node) open(in *core.Inode, flags uint32) (gofs.FileHandle, uint32) {
	n.p.Opened(in)
	h := &handle{appendMode: flags&syscall.O_APPEND != 0, noAtime: flags&syscall.O_NOATIME != 0}
	if n.opts.PageCache {
		return h, 0
	}
	if n.opts.ReadCache && flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return h, fuse.FOPEN_KEEP_CACHE
	}
	// Direct I/O: reads are served from the pool mapping without a page
	// cache copy, and parallel writers to one file are not serialised by
	// the kernel. Read-ahead applies only to page-cache reads (above, and
	// mmap): SetReadAhead sizes it.
	return h, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	if err := n.p.CheckOpen(n.in, write, flags&syscall.O_APPEND != 0, flags&syscall.O_TRUNC != 0); err != nil {
		return nil, 0, n.fail("open", err)
	}
	trunc := flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY
	// The cluster's part (close-to-open, the writer lock) comes before the
	// truncation, which only the lock holder may do.
	cl, err := n.opts.Cluster.Open(ctx, n.in, write, trunc)
	if err != nil {
		return nil, 0, n.fail("open", err)
	}
	if trunc {
		old := int64(n.in.Attr().Size)
		if err := n.p.Truncate(n.in, 0); err != nil {
			n.opts.Cluster.Release(cl)
			return nil, 0, n.fail("open(O_TRUNC)", err)
		}
		n.opts.Cluster.Resized(n.in, old, 0)
	}
	fh, fl := n.open(n.in, flags)
	fh.(*handle).cl = cl
	return fh, fl, 0
}

// sliceResult hands slices of the pool mapping to go-fuse, which writes
// them to the kernel with writev; Done releases the file's read lock
// afterwards, so no writer changes the bytes while they are in flight.
type sliceResult struct{ r *core.ReadData }

func (s sliceResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	if len(s.r.Slices) == 1 {
		return s.r.Slices[0], fuse.OK
	}
	p := 0
	for _, d := range s.r.Slices {
		p += copy(buf[p:], d)
	}
	return buf[:p], fuse.OK
}
func (s sliceResult) Size() int                       { return s.r.Size }
func (s sliceResult) Done()                           { s.r.Done() }
func (s sliceResult) Slices() ([][]byte, fuse.Status) { return s.r.Slices, fuse.OK }

func (n *fileNode) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if n.in.IsTable() {
		return n.tableRead(dest, off)
	}
	c := callerOf(ctx)
	if h, ok := fh.(*handle); ok {
		c.NoAtime = h.noAtime
	}
	defer n.opts.Cluster.Pin(n.in, off, int64(len(dest)))() // not evicted before ReadAs holds its range
	if err := n.opts.Cluster.Fill(ctx, n.in, off, int64(len(dest))); err != nil {
		return nil, n.fail("read", err) // chunks not in the pool yet come first
	}
	r, err := n.p.ReadAs(c, n.in, off, len(dest))
	if err != nil {
		return nil, n.fail("read", err)
	}
	return sliceResult{r}, 0
}

func (n *fileNode) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if n.in.IsTable() {
		return n.tableWrite(data, off)
	}
	h, _ := fh.(*handle)
	var k int
	var killed bool
	var err error
	_ = n.p.RetryNoSpace(func() error {
		k, killed, err = n.p.WritePrivsAs(callerOf(ctx), n.in, off, data, h != nil && h.appendMode)
		if k > 0 {
			return nil // wrote something: not retried, reported as it is
		}
		return err
	})
	if k > 0 {
		n.opts.Cluster.Wrote(n.in, off, int64(k))
	}
	if killed {
		// The kernel caches the mode and learns of the change only so.
		// Attributes only (offset -1): no page lock, safe while the
		// kernel holds the inode for this write.
		n.invalidate(-1)
	}
	if err != nil {
		e := errno(err)
		if e == syscall.EIO {
			n.opts.Log.Error("write failed", zap.Uint64("ino", uint64(n.in.Ino)), zap.Int64("offset", off),
				zap.Int("bytes", len(data)), zap.Error(err))
		}
		return uint32(k), e
	}
	return uint32(k), 0
}

func (n *fileNode) Allocate(ctx context.Context, fh gofs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	privs := n.in.Mode() & 0o6000
	if err := n.p.RetryNoSpace(func() error { return n.p.FallocateAs(callerOf(ctx), n.in, off, size, mode) }); err != nil {
		return n.fail("fallocate", err)
	}
	n.opts.Cluster.Wrote(n.in, int64(off), int64(size))
	if privs != 0 && n.in.Mode()&0o6000 != privs {
		n.invalidate(-1) // the kernel's cached mode is stale (see Write)
	}
	return 0
}

// Lseek answers SEEK_DATA and SEEK_HOLE (the kernel handles the other
// whences itself) from the extent map.
func (n *fileNode) Lseek(ctx context.Context, fh gofs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	switch whence {
	case unix.SEEK_DATA, unix.SEEK_HOLE:
	default:
		return 0, syscall.EINVAL
	}
	if n.opts.Cluster.AllData(n.in) { // chunks not in the pool are data (DESIGN.md §Cluster)
		switch size := n.in.Attr().Size; {
		case off >= size:
			return 0, n.fail("lseek", core.ErrNoSuchOffset)
		case whence == unix.SEEK_HOLE:
			return size, 0
		}
		return off, 0
	}
	o, err := n.p.SeekData(n.in, off, whence == unix.SEEK_HOLE)
	if err != nil {
		return 0, n.fail("lseek", err)
	}
	return o, 0
}

// Flush (each close(2)) commits a cluster file's writer (DESIGN.md
// §Cluster): a failed commit is this close's EIO.
func (n *fileNode) Flush(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	if h, ok := fh.(*handle); ok && h.cl != nil {
		return n.fail("commit", n.opts.Cluster.Flush(ctx, h.cl))
	}
	return 0
}

func (n *fileNode) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if n.in.IsTable() {
		return n.tableFsync()
	}
	if err := n.p.Fsync(n.in); err != nil {
		return n.fail("fsync", err)
	}
	return n.fail("commit", n.opts.Cluster.Fsync(ctx, n.in))
}

func (n *fileNode) Release(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	if h, ok := fh.(*handle); ok && h.cl != nil {
		n.opts.Cluster.Release(h.cl)
	}
	if err := n.p.Released(n.in); err != nil {
		n.opts.Log.Error("release failed; the inode stays an orphan until the next mount frees it",
			zap.Uint64("ino", uint64(n.in.Ino)), zap.Error(err))
	}
	return 0
}

// ---------------------------------------------------------------------
// Directories

// dirHandle lists a directory by slot position: "." and ".." first, then
// slot s at offset s+3. Slots never move, so a concurrent create, unlink
// or rename never makes an untouched entry vanish or repeat.
type dirHandle struct {
	n   *dirNode
	pos uint64 // next offset to return
}

var (
	_ = (gofs.FileReaddirenter)((*dirHandle)(nil))
	_ = (gofs.FileSeekdirer)((*dirHandle)(nil))
	_ = (gofs.FileFsyncdirer)((*dirHandle)(nil))
	_ = (gofs.FileReleasedirer)((*dirHandle)(nil))
)

func (n *dirNode) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	n.opts.Cluster.SyncDir(ctx, n.in) // names committed on other nodes
	return &dirHandle{n: n}, 0, 0
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	switch d.pos {
	case 0:
		d.n.p.Accessed(d.n.in) // a listing reads the directory
		d.pos = 1
		return &fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: uint64(d.n.in.Ino), Off: 1}, 0
	case 1:
		d.pos = 2
		ino := uint64(d.n.in.Ino)
		if p := d.n.p.Parent(d.n.in); p != nil {
			ino = uint64(p.Ino)
		}
		return &fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: ino, Off: 2}, 0
	}
	e, ok := d.n.p.ReadDir(d.n.in, d.pos-2)
	if !ok {
		return nil, 0
	}
	d.pos = e.Next + 2
	return &fuse.DirEntry{Name: e.Name, Mode: e.Mode, Ino: uint64(e.Ino), Off: d.pos}, 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.pos = off
	return 0
}

// Fsyncdir has nothing to do: every directory change is durable when its
// operation returns.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno { return 0 }

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {}
