package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// XattrState is the pool xattr of a cluster file (the package doc). It is
// in the trusted namespace: only root reads it, and fs refuses to let
// anyone set or remove it.
const XattrState = "trusted.dnnfs.cluster"

// stateJSON is XattrState's value.
type stateJSON struct {
	ID     namespace.FileID  `json:"id"`
	Ver    namespace.Version `json:"ver"`  // 0: never committed
	Base   int64             `json:"base"` // etcd mod revision of files/<id> at ver
	CS     int64             `json:"cs"`   // chunk size
	Chunks string            `json:"chunks"`
	// Src names the foreign object of an attached file (read-only).
	Src string `json:"src,omitempty"`
}

// file is the cluster state of one pool file, guarded by mu.
type file struct {
	mu      sync.Mutex
	in      *core.Inode
	id      namespace.FileID
	ver     namespace.Version
	base    int64
	cs      int64
	mtime   int64 // committed mtime (restored after fills)
	present namespace.Chunks
	crc     map[namespace.ChunkIdx]objstore.CRC32C
	dirty   bool             // changed since ver
	changed namespace.Chunks // chunks written since ver
	opens   int              // open handles on this node
	writers int              // of them for writing
	lock    *namespace.Writer
	removed bool
	src     string // an attached object's record (read-only); "" for dnnfs's own files
	// pending: a newer version or the loss of the name was seen while the
	// file was open here; the last close looks again (recheck).
	pending bool
	// inflight are the changed chunks a commit is uploading: neither
	// served as the old version's nor filled over.
	inflight namespace.Chunks
	commitMu sync.Mutex       // one commit of the file at a time
	lockMu   sync.Mutex       // this node's takes and gives of the writer lock, in order
	ahead    namespace.Chunks // chunks being read ahead
	// storing: chunks whose verified bytes are being written into the
	// pool, outside mu (a 32 MiB write and its flush); each channel closes
	// when that store ends. Reads of other chunks, the chunk server and
	// other stores go on meanwhile (DESIGN §Cluster, "Reading").
	storing map[namespace.ChunkIdx]chan struct{}
}

// waitStoresLocked waits, with f.mu held (released while waiting), until no
// chunk of f is being stored: a writer's bytes must not be overwritten by a
// fill that began before the writer opened.
func (f *file) waitStoresLocked() {
	for len(f.storing) > 0 {
		var ch chan struct{}
		for _, c := range f.storing {
			ch = c
			break
		}
		f.mu.Unlock()
		<-ch
		f.mu.Lock()
	}
}

// Handle is one open of a cluster file (fs keeps it in its file handle).
type Handle struct {
	f     *file
	write bool
}

// stateLocked is f's state as XattrState holds it (f.mu held).
func (f *file) stateLocked() stateJSON {
	return stateJSON{ID: f.id, Ver: f.ver, Base: f.base, CS: f.cs, Chunks: f.present.String(), Src: f.src}
}

// saveLocked persists the state in the file's xattr.
// Precondition: f.mu is held.
func (n *Node) saveLocked(f *file) error {
	b, _ := json.Marshal(f.stateLocked())
	return n.p.Setxattr(f.in, XattrState, b, 0)
}

// load reads a pool file's cluster state (nil: a local-only file).
func (n *Node) load(in *core.Inode) *file {
	if in.IsDir() || in.Mode()&format.ModeType != format.ModeReg {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if f, ok := n.files[in.Ino]; ok && f.in == in {
		return f
	}
	b, err := n.p.Getxattr(in, XattrState)
	if err != nil {
		return nil
	}
	var st stateJSON
	if json.Unmarshal(b, &st) != nil || st.ID.Valid() != nil {
		n.log.Warn("ignoring a bad cluster state", zap.Uint64("ino", uint64(in.Ino)), zap.ByteString("value", b))
		return nil
	}
	ch, err := namespace.ParseChunks(st.Chunks)
	if err != nil {
		ch = namespace.Chunks{}
	}
	f := &file{in: in, id: st.ID, ver: st.Ver, base: st.Base, cs: st.CS, present: ch, src: st.Src,
		crc: map[namespace.ChunkIdx]objstore.CRC32C{}, mtime: in.Attr().Mtime.UnixNano()}
	if f.ver == 0 {
		f.dirty = true
	}
	n.files[in.Ino] = f
	n.byID[f.id] = f
	return f
}

// fileOf returns the cluster state of in, nil for a local-only file.
func (n *Node) fileOf(in *core.Inode) *file {
	n.mu.Lock()
	f, ok := n.files[in.Ino]
	n.mu.Unlock()
	if ok && f.in == in {
		return f
	}
	// Not known, or the state of an earlier inode of that number (its
	// last name went another way than Unlink: load replaces it).
	return n.load(in)
}

// adopt makes a local file a cluster file (a new FileID, never committed).
func (n *Node) adopt(in *core.Inode) (*file, error) {
	n.mu.Lock()
	if f, ok := n.files[in.Ino]; ok && f.in == in {
		n.mu.Unlock()
		return f, nil
	}
	f := &file{in: in, id: namespace.NewFileID(), cs: n.ns.ChunkSize(), dirty: true,
		crc: map[namespace.ChunkIdx]objstore.CRC32C{}}
	n.files[in.Ino] = f
	n.byID[f.id] = f
	n.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f, n.saveLocked(f)
}

func (n *Node) forget(f *file) {
	n.mu.Lock()
	if n.files[f.in.Ino] == f {
		delete(n.files, f.in.Ino)
	}
	if n.byID[f.id] == f {
		delete(n.byID, f.id)
	}
	n.mu.Unlock()
}

// pathOf is a pool inode's namespace path ("" for the root or an unlinked
// inode).
func (n *Node) pathOf(in *core.Inode) string {
	p := n.p.PathOf(in)
	return strings.TrimPrefix(p, "/")
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// invalidate drops the kernel's cached attributes (and pages) of ino.
// Callers inside a FUSE request run it in a goroutine (the kernel may be
// waiting for that request). Nothing is returned: the notify fails only
// when the kernel has nothing cached, and what it has cached expires
// within fs's one-second attribute and entry timeouts anyway (DESIGN
// §Cluster, "Close-to-open").
func (n *Node) invalidate(ino core.Ino) {
	n.mu.Lock()
	nt := n.notify
	n.mu.Unlock()
	if nt != nil {
		nt.InodeNotify(uint64(ino), 0, 0)
	}
}

// invalidateEntry drops the kernel's cached entry name of dir; as
// invalidate, its failure needs no handling.
func (n *Node) invalidateEntry(dir core.Ino, name string) {
	n.mu.Lock()
	nt := n.notify
	n.mu.Unlock()
	if nt != nil {
		nt.EntryNotify(uint64(dir), name)
	}
}

// away reports that this node has no lease (etcd has been unreachable for
// longer than its TTL): reads of the pool then go on without asking etcd
// first, instead of each waiting for a call to time out.
func (n *Node) away() bool { return n.ns.Lease() == 0 }

// uninterrupted keeps a FUSE request's values but not its cancellation:
// the kernel interrupts a request for any signal to the caller (a Go
// program gets them all the time, for preemption), and an etcd or S3 step
// cut short would fail an open or a commit that would have worked. Every
// step is bounded by its own timeout instead.
func uninterrupted(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// parentOf resolves a namespace path's directory in the pool.
func (n *Node) parentOf(path string) (*core.Inode, string, bool) {
	dir := n.p.Root()
	parts := strings.Split(path, "/")
	for _, c := range parts[:len(parts)-1] {
		d, err := n.p.Lookup(dir, c)
		if err != nil || !d.IsDir() {
			return nil, "", false
		}
		dir = d
	}
	return dir, parts[len(parts)-1], true
}
