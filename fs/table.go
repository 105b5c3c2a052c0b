package fs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
	"github.com/dnnfs/dnnfs/embedding/wire"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/kv"
)

// Embedding tables through the mount: a table file's reads and writes go
// to the SSD tier's scheduler; TABLE.lookup is its request file.

const (
	// XattrTable: set 'rows=R,dim=D,dtype=f32|f16|bf16[,shard=SIZE]' on
	// an empty file to make it a table; read it back with the shard
	// layout.
	XattrTable = "user.dnnfs.table"
	// XattrShards (read-only) on a table: its translation table as JSON.
	XattrShards = "user.dnnfs.shards"
	// XattrMigrate (write-only) on a table: 'shard=I,to=DEV' moves a
	// shard, 'shard=I,replicate=DEV' adds a replica, 'shard=I,drop-replica'
	// removes it; DEV 0 lets placement choose. Returns when done.
	XattrMigrate = "user.dnnfs.migrate"
	// LookupSuffix names a table's request file: TABLE + LookupSuffix.
	LookupSuffix = ".lookup"
	// lookupInoBit marks the inode numbers of request files (pool inode
	// numbers stay far below it).
	lookupInoBit = 1 << 62
	// maxInFlight bounds the requests a handle may have in flight.
	maxInFlight = 4096
)

// TableSpec is a parsed user.dnnfs.table value.
type TableSpec struct {
	Rows       uint64
	Dim        uint32
	Dtype      uint8
	ShardBytes int64
}

// ParseTableSpec reads 'rows=R,dim=D,dtype=f32|f16|bf16[,shard=SIZE]'.
func ParseTableSpec(v string) (TableSpec, error) {
	var s TableSpec
	items, err := kv.Parse(v)
	if err != nil {
		return s, err
	}
	for _, it := range items {
		switch it.Key {
		case "rows":
			s.Rows, err = it.Uint(1, math.MaxUint64)
		case "dim":
			var d uint64
			d, err = it.Uint(1, math.MaxUint32)
			s.Dim = uint32(d)
		case "dtype":
			var d wire.Dtype
			if d, err = wire.ParseDtype(it.Value); err != nil {
				err = it.Errorf("want f32, f16 or bf16")
			}
			s.Dtype = uint8(d)
		case "shard":
			s.ShardBytes, err = it.Size()
		case "shard_rows", "shards", "row_bytes":
			// Informational keys of the value read back; ignored.
		default:
			err = it.Unknown("rows", "dim", "dtype", "shard")
		}
		if err != nil {
			return s, err
		}
	}
	if s.Rows == 0 || s.Dim == 0 || s.Dtype == 0 {
		return s, fmt.Errorf("rows, dim and dtype are required")
	}
	return s, nil
}

func (n *node) tier() *embedding.Tier { return n.opts.Tier }

// table returns the DRAM table for a table inode.
func (n *node) table() (*embedding.Table, syscall.Errno) {
	if n.tier() == nil {
		return nil, syscall.EIO
	}
	tb, ok := n.tier().Table(n.in)
	if !ok {
		n.opts.Log.Error("table inode has no SSD-tier state", zap.Uint64("ino", uint64(n.in.Ino)))
		return nil, syscall.EIO
	}
	return tb, 0
}

func (n *fileNode) tableRead(dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	tb, e := n.table()
	if e != 0 {
		return nil, e
	}
	k, err := tb.ReadAt(dest, off)
	if err != nil {
		n.opts.Log.Error("embedding table read failed", zap.Uint64("ino", uint64(n.in.Ino)), zap.Int64("offset", off),
			zap.Int("bytes", len(dest)), zap.Error(err))
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *fileNode) tableWrite(data []byte, off int64) (uint32, syscall.Errno) {
	tb, e := n.table()
	if e != 0 {
		return 0, e
	}
	k, err := tb.WriteAt(data, off)
	if err != nil {
		if errors.Is(err, embedding.ErrPastEnd) {
			return 0, syscall.EFBIG
		}
		n.opts.Log.Error("embedding table write failed", zap.Uint64("ino", uint64(n.in.Ino)), zap.Int64("offset", off),
			zap.Int("bytes", len(data)), zap.Error(err))
		return 0, syscall.EIO
	}
	return uint32(k), 0
}

func (n *fileNode) tableFsync() syscall.Errno {
	if n.tier() == nil {
		return syscall.EIO
	}
	if err := n.tier().Sync(); err != nil {
		n.opts.Log.Error("embedding table fsync failed", zap.Uint64("ino", uint64(n.in.Ino)), zap.Error(err))
		return syscall.EIO
	}
	return 0
}

// setTable handles setxattr user.dnnfs.table.
func (n *node) setTable(value []byte) syscall.Errno {
	spec, err := ParseTableSpec(string(value))
	if err != nil {
		n.opts.Log.Warn("bad table request", zap.Uint64("ino", uint64(n.in.Ino)), zap.String("value", string(value)), zap.Error(err))
		return syscall.EINVAL
	}
	if n.tier() == nil {
		n.opts.Log.Warn("embedding table requested but the mount has no SSD tier; remount with --ssd DIR",
			zap.Uint64("ino", uint64(n.in.Ino)))
		return syscall.EOPNOTSUPP
	}
	if n.in.IsTable() {
		return syscall.EEXIST
	}
	err = n.tier().CreateTable(n.in, spec.Rows, spec.Dim, spec.Dtype, spec.ShardBytes)
	switch {
	case err == nil:
		go n.invalidate(0) // the size changed behind the attribute cache
		return 0
	case errors.Is(err, embedding.ErrNoSpace):
		n.opts.Log.Warn("no room for the table on the SSD tier", zap.Uint64("ino", uint64(n.in.Ino)), zap.Error(err))
		return syscall.ENOSPC
	case errors.Is(err, embedding.ErrNoTier):
		return syscall.EOPNOTSUPP
	}
	if e := errno(err); e != syscall.EIO {
		n.opts.Log.Warn("table not created", zap.Uint64("ino", uint64(n.in.Ino)), zap.Error(err))
		return e
	}
	return n.fail("create table", err)
}

// tableXattr is the value read back from user.dnnfs.table.
func (n *node) tableXattr() ([]byte, bool) {
	h, ok := n.in.Table()
	if !ok {
		return nil, false
	}
	return []byte(fmt.Sprintf("rows=%d,dim=%d,dtype=%s,shard_rows=%d,shards=%d,row_bytes=%d",
		h.Rows, h.Dim, wire.Dtype(h.Dtype), h.ShardRows, h.Shards, h.RowBytes())), true
}

// migrate handles setxattr user.dnnfs.migrate.
func (n *node) migrate(value []byte) syscall.Errno {
	tb, e := n.table()
	if e != 0 {
		if n.tier() == nil || !n.in.IsTable() {
			return syscall.EINVAL
		}
		return e
	}
	const want = "want shard=I,to=DEV | shard=I,replicate=DEV | shard=I,drop-replica"
	shard, dev := -1, -1
	var replicate, drop bool
	items, err := kv.Parse(string(value), "drop-replica")
	for _, it := range items {
		var v int64
		switch it.Key {
		case "shard":
			v, err = it.Int(0, math.MaxInt32)
			shard = int(v)
		case "to", "replicate":
			v, err = it.Int(0, 0xffff)
			dev, replicate = int(v), it.Key == "replicate"
		case "drop-replica":
			drop = true
		default:
			err = it.Unknown("shard", "to", "replicate", "drop-replica")
		}
		if err != nil {
			break
		}
	}
	if err == nil && (shard < 0 || (dev < 0) == !drop) {
		err = errors.New("shard and one of to, replicate and drop-replica are required")
	}
	if err != nil {
		n.opts.Log.Warn("bad migrate request: "+want, zap.String("value", string(value)), zap.Error(err))
		return syscall.EINVAL
	}
	if drop {
		err = n.tier().DropReplica(tb, shard)
	} else {
		err = n.tier().MoveShard(tb, shard, format.DevID(dev), replicate)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, embedding.ErrInvalid):
		n.opts.Log.Warn("migrate request refused", zap.Uint64("ino", uint64(n.in.Ino)), zap.Error(err))
		return syscall.EINVAL
	case errors.Is(err, embedding.ErrNoSpace):
		n.opts.Log.Warn("migrate request refused", zap.Uint64("ino", uint64(n.in.Ino)), zap.Error(err))
		return syscall.ENOSPC
	case errors.Is(err, embedding.ErrMoving):
		return syscall.EBUSY
	}
	n.opts.Log.Error("shard move failed; the shard stays where it was", zap.Uint64("ino", uint64(n.in.Ino)), zap.Int("shard", shard), zap.Error(err))
	return syscall.EIO
}

// ---------------------------------------------------------------------
// Request files

// lookupNode is TABLE.lookup: not a pool inode, not listed by readdir.
type lookupNode struct {
	gofs.Inode
	dir   *dirNode
	table *core.Inode
}

var (
	_ = (gofs.NodeOpener)((*lookupNode)(nil))
	_ = (gofs.NodeGetattrer)((*lookupNode)(nil))
	_ = (gofs.NodeStatxer)((*lookupNode)(nil))
	_ = (gofs.NodeSetattrer)((*lookupNode)(nil))
	_ = (gofs.NodeReader)((*lookupNode)(nil))
	_ = (gofs.NodeWriter)((*lookupNode)(nil))
	_ = (gofs.NodeReleaser)((*lookupNode)(nil))
	_ = (gofs.NodeFsyncer)((*lookupNode)(nil))
	_ = (gofs.NodeFlusher)((*lookupNode)(nil))
)

// lookupChild resolves NAME.lookup next to a table NAME.
func (n *dirNode) lookupChild(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, bool) {
	base, ok := strings.CutSuffix(name, LookupSuffix)
	if !ok || base == "" || n.tier() == nil {
		return nil, false
	}
	in, err := n.p.Lookup(n.in, base)
	if err != nil || !in.IsTable() {
		return nil, false
	}
	ln := &lookupNode{dir: n, table: in}
	ln.fill(&out.Attr)
	// Revalidated on every use (go-fuse turns a zero timeout into its
	// default): after the table is deleted and NAME made again, a cached
	// entry would still lead to the old table's request file.
	out.SetEntryTimeout(time.Nanosecond)
	a := in.Attr()
	return n.NewInode(ctx, ln, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: uint64(in.Ino) | lookupInoBit, Gen: a.Gen}), true
}

func (l *lookupNode) fill(out *fuse.Attr) {
	a := l.table.Attr()
	out.Ino = uint64(a.Ino) | lookupInoBit
	out.Mode = syscall.S_IFREG | a.Mode&0o666
	out.Nlink = 1
	out.Uid, out.Gid = a.UID, a.GID
	out.Blksize = 4096
	out.SetTimes(&a.Atime, &a.Mtime, &a.Ctime)
}

func (l *lookupNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	l.fill(&out.Attr)
	return 0
}

// Statx answers like Getattr: a request file has no birth time. (An
// ENOSYS here would turn FUSE_STATX off for the whole mount.)
func (l *lookupNode) Statx(ctx context.Context, fh gofs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	var a fuse.Attr
	l.fill(&a)
	fillStatx(&a, time.Time{}, &out.Statx)
	return 0
}

// Setattr accepts (and ignores) the size change of open(O_TRUNC).
func (l *lookupNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	l.fill(&out.Attr)
	return 0
}

func (l *lookupNode) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

// lookupHandle is one open request file: the request being reassembled,
// completed results in completion order, and per-thread partial reads.
type lookupHandle struct {
	tb       *embedding.Table
	log      *zap.Logger
	nonblock bool

	mu       sync.Mutex
	ready    chan struct{} // closed and replaced when a result arrives or the handle is flushed
	flushes  int           // close() calls on the handle's descriptors so far
	results  [][]byte
	inflight int
	drain    map[uint32][]byte // TID -> rest of a result being read
	asm      []byte            // request being reassembled from write chunks
}

func (l *lookupNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	t := l.dir.tier()
	if t == nil {
		return nil, 0, syscall.ENOENT
	}
	tb, ok := t.Table(l.table)
	if !ok {
		return nil, 0, syscall.ENOENT // the table is gone
	}
	// The handle keeps the table open: it is not freed under lookups.
	l.dir.p.Opened(l.table)
	h := &lookupHandle{tb: tb, log: l.dir.opts.Log, nonblock: flags&syscall.O_NONBLOCK != 0,
		ready: make(chan struct{}), drain: map[uint32][]byte{}}
	return h, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_STREAM | fuse.FOPEN_NONSEEKABLE, 0
}

func (l *lookupNode) Release(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	if err := l.dir.p.Released(l.table); err != nil {
		l.dir.opts.Log.Error("release of a table failed", zap.Uint64("ino", uint64(l.table.Ino)), zap.Error(err))
	}
	return 0
}

// Write takes one request per write() call. The kernel splits a call
// larger than the mount's max write into chunks at increasing offsets
// (offset 0 first): they are reassembled here.
func (l *lookupNode) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	h := fh.(*lookupHandle)
	h.mu.Lock()
	defer h.mu.Unlock()
	bad := func(err error) (uint32, syscall.Errno) {
		h.asm = nil
		h.log.Warn("bad embedding lookup request", zap.Uint64("table_ino", uint64(l.table.Ino)), zap.Error(err))
		return 0, syscall.EINVAL
	}
	if off == 0 && h.asm == nil && wire.RequestLength(data) == uint64(len(data)) {
		// The common case: the whole request in one chunk. Parse it in
		// place; only a request split over chunks is copied to reassemble.
		return l.submit(h, data, bad)
	}
	switch {
	case off == 0:
		if h.asm != nil {
			h.log.Warn("incomplete lookup request dropped: a new one started", zap.Uint64("table_ino", uint64(l.table.Ino)),
				zap.Int("bytes_received", len(h.asm)))
		}
		h.asm = append([]byte(nil), data...)
	case h.asm != nil && off == int64(len(h.asm)):
		h.asm = append(h.asm, data...)
	default:
		return bad(&wire.FieldError{Field: "length", Msg: fmt.Sprintf("write at offset %d continues no request", off)})
	}
	// The kernel splits a write(2) larger than a request into requests of
	// at most maxRequest() bytes and as many pages: from a buffer not
	// starting on a page, the ones before the last are up to a page less
	// than that. A chunk that long may be followed by more; a shorter one
	// ends the write(2).
	last := len(data) <= maxRequest()-os.Getpagesize()
	total := wire.RequestLength(h.asm)
	switch {
	case total == 0 && last:
		return bad(&wire.FieldError{Field: "length", Msg: fmt.Sprintf("%d bytes, shorter than the %d-byte header", len(h.asm), wire.RequestHeaderSize)})
	case total == 0:
		return uint32(len(data)), 0
	case uint64(len(h.asm)) > total:
		return bad(&wire.FieldError{Field: "length", Msg: fmt.Sprintf("%d bytes written, header says %d", len(h.asm), total)})
	case uint64(len(h.asm)) < total && last:
		return bad(&wire.FieldError{Field: "length", Msg: fmt.Sprintf("%d bytes written, header says %d (truncated buffer?)", len(h.asm), total)})
	case uint64(len(h.asm)) < total:
		return uint32(len(data)), 0
	}
	req := h.asm
	h.asm = nil
	if _, errno := l.submit(h, req, bad); errno != 0 {
		return 0, errno
	}
	return uint32(len(data)), 0 // this chunk's bytes: the kernel refuses a count past them (EIO)
}

// submit (h.mu held) parses a whole request and hands it to the scheduler.
func (l *lookupNode) submit(h *lookupHandle, b []byte, bad func(error) (uint32, syscall.Errno)) (uint32, syscall.Errno) {
	req, err := h.tb.ParseLookup(b)
	if err != nil {
		return bad(err)
	}
	if h.inflight >= maxInFlight {
		h.log.Warn("too many lookups in flight on one handle; read results first", zap.Int("in_flight", h.inflight))
		return 0, syscall.EAGAIN
	}
	h.inflight++
	h.tb.Lookup(req, h.complete) // completes on another goroutine (it takes h.mu)
	return uint32(len(b)), 0
}

func (h *lookupHandle) complete(res []byte) {
	h.mu.Lock()
	h.results = append(h.results, res)
	h.inflight--
	close(h.ready)
	h.ready = make(chan struct{})
	h.mu.Unlock()
}

// Flush runs at every close() of a descriptor of the handle: readers
// blocked on it return EOF, so a process can stop its reader threads by
// closing the file.
func (l *lookupNode) Flush(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	h := fh.(*lookupHandle)
	h.mu.Lock()
	h.flushes++
	close(h.ready)
	h.ready = make(chan struct{})
	h.mu.Unlock()
	return 0
}

// Read returns the rest of this thread's partly read result, else the
// next completed one, waiting for it like a pipe (EAGAIN with O_NONBLOCK;
// EOF if the file is closed meanwhile).
func (l *lookupNode) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h := fh.(*lookupHandle)
	tid := callerOf(ctx).TID
	h.mu.Lock()
	defer h.mu.Unlock()
	res, ok := h.drain[tid]
	if ok {
		delete(h.drain, tid)
	} else {
		if off != 0 {
			return fuse.ReadResultData(nil), 0 // the end of one read() call's result
		}
		flushes := h.flushes
		for len(h.results) == 0 {
			if h.flushes != flushes {
				return fuse.ReadResultData(nil), 0
			}
			if h.nonblock {
				return nil, syscall.EAGAIN
			}
			ready := h.ready
			h.mu.Unlock()
			select {
			case <-ready:
			case <-ctx.Done():
				h.mu.Lock()
				return nil, syscall.EINTR
			}
			h.mu.Lock()
		}
		res = h.results[0]
		h.results[0] = nil
		h.results = h.results[1:]
	}
	k := copy(dest, res)
	if k < len(res) {
		h.drain[tid] = res[k:]
	}
	return fuse.ReadResultData(dest[:k]), 0
}
