package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

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
	// other stores go on meanwhile (DESIGN.md §Cluster, "Reads").
	storing map[namespace.ChunkIdx]chan struct{}
}

// waitStoresLocked waits, with mu held (released while waiting), until no
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

func (f *file) stateLocked() stateJSON {
	return stateJSON{ID: f.id, Ver: f.ver, Base: f.base, CS: f.cs, Chunks: f.present.String(), Src: f.src}
}

// saveLocked persists the state in the file's xattr.
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

// The errors of cluster operations (fs maps them: ErrWriterBusy to EBUSY,
// the others to EIO).
var (
	// ErrWriterBusy: another node has the file open for writing (its
	// writer lock); the second writer is refused, not queued.
	ErrWriterBusy = errors.New("another node writes the file")
	// ErrCluster: etcd or S3 did not do what a commit, unlink, rename,
	// fetch or writer lock needed (unreachable, refused, a conflicting
	// transaction); nothing of the operation is visible to other nodes.
	ErrCluster = errors.New("cluster operation failed")
	// ErrReadOnly: an open for writing of an attached object.
	ErrReadOnly = errors.New("attached objects are read-only")
)

func ioErr(what string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrCluster, what, err)
}

func (n *Node) invalidate(ino core.Ino) {
	n.mu.Lock()
	nt := n.notify
	n.mu.Unlock()
	if nt != nil {
		nt.InodeNotify(uint64(ino), 0, 0)
	}
}

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

// ---------------------------------------------------------------------
// Names

// Lookup resolves a name the pool does not have from the namespace: a file
// committed elsewhere becomes a placeholder, a directory implied by names
// below it a local directory. core.ErrNotFound when the namespace has no
// such name either (or etcd does not answer).
func (n *Node) Lookup(ctx context.Context, dir *core.Inode, name string) (*core.Inode, error) {
	ctx = uninterrupted(ctx)
	if n == nil {
		return nil, core.ErrNotFound
	}
	path := join(n.pathOf(dir), name)
	if path == "" || namespace.CleanPath(path) != nil || n.away() {
		return nil, core.ErrNotFound
	}
	// The name and its record at one revision: one consistent view.
	id, rec, rev, err := n.ns.Stat(ctx, path)
	n.log.Debug("cluster lookup", zap.String("path", path), zap.String("id", string(id)), zap.Error(err))
	switch {
	case errors.Is(err, namespace.ErrIsDir):
		return n.placeDir(dir, name)
	case err != nil:
		return nil, core.ErrNotFound
	}
	return n.placeRec(ctx, dir, name, id, rec, rev)
}

// SyncDir creates placeholders for the names of a directory the pool does
// not have yet (before a listing).
func (n *Node) SyncDir(ctx context.Context, dir *core.Inode) {
	ctx = uninterrupted(ctx)
	if n == nil {
		return
	}
	path := n.pathOf(dir)
	if path == "" && dir.Ino != n.p.Root().Ino || n.away() {
		return // unlinked, or etcd away
	}
	ents, err := n.ns.List(ctx, path)
	if err != nil {
		if !errors.Is(err, namespace.ErrNotFound) {
			n.log.Debug("cluster listing", zap.String("path", path), zap.Error(err))
		}
		return
	}
	for _, e := range ents {
		if _, err := n.p.Lookup(dir, e.Name); !errors.Is(err, core.ErrNotFound) {
			continue
		}
		if e.Dir {
			_, err = n.placeDir(dir, e.Name)
		} else {
			_, err = n.place(ctx, dir, e.Name, e.ID)
		}
		if err != nil {
			n.log.Debug("cluster placeholder", zap.String("path", join(path, e.Name)), zap.Error(err))
		}
	}
}

func (n *Node) placeDir(dir *core.Inode, name string) (*core.Inode, error) {
	n.names.Lock()
	defer n.names.Unlock()
	if in, err := n.p.Lookup(dir, name); err == nil {
		return in, nil
	}
	a := dir.Attr()
	return n.p.Create(dir, name, core.NewInode{Mode: format.ModeDir | 0o755, UID: a.UID, GID: a.GID})
}

// place makes the placeholder of a committed file: its size, mode, owner
// and mtime, no chunk present.
func (n *Node) place(ctx context.Context, dir *core.Inode, name string, id namespace.FileID) (*core.Inode, error) {
	rec, rev, err := n.ns.File(ctx, id)
	if err != nil {
		return nil, core.ErrNotFound
	}
	return n.placeRec(ctx, dir, name, id, rec, rev)
}

// placeRec is place with the record read.
func (n *Node) placeRec(ctx context.Context, dir *core.Inode, name string, id namespace.FileID, rec namespace.FileRecord, rev int64) (*core.Inode, error) {
	n.names.Lock()
	defer n.names.Unlock()
	if in, err := n.p.Lookup(dir, name); err == nil {
		return in, nil
	}
	n.mu.Lock()
	other := n.byID[id]
	n.mu.Unlock()
	if other != nil {
		// Renamed on another node while this one has it under its old
		// name: the local file moves along, with its chunks.
		if old := n.pathOf(other.in); old != "" {
			if odir, oname, ok := n.parentOf(old); ok {
				if err := n.p.Rename(odir, oname, dir, name, 0); err == nil {
					go n.invalidateEntry(odir.Ino, oname) // not from inside this request
					n.revalidate(ctx, other)
					return other.in, nil
				}
			}
		}
	}
	if rec.IsSymlink() {
		return n.placeSymlinkLocked(dir, name, id, rec, rev)
	}
	in, err := n.p.Create(dir, name, core.NewInode{Mode: format.ModeReg | rec.Mode&format.ModePerm, UID: rec.UID, GID: rec.GID})
	if err != nil {
		return nil, err
	}
	f := &file{in: in, id: id, crc: map[namespace.ChunkIdx]objstore.CRC32C{}}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := n.resetLocked(f, rec, rev); err != nil {
		_ = n.p.Unlink(dir, name)
		return nil, err
	}
	n.mu.Lock()
	n.files[in.Ino] = f
	n.byID[id] = f
	n.mu.Unlock()
	return in, nil
}

// placeSymlinkLocked makes the local copy of a symbolic link committed on
// another node (n.names held): the whole link is in its record.
func (n *Node) placeSymlinkLocked(dir *core.Inode, name string, id namespace.FileID, rec namespace.FileRecord, rev int64) (*core.Inode, error) {
	in, err := n.p.Create(dir, name, core.NewInode{Mode: format.ModeLnk | 0o777, UID: rec.UID, GID: rec.GID, Target: rec.Target})
	if err != nil {
		return nil, err
	}
	mt := rec.MtimeTime()
	if err := n.p.Setattr(in, core.SetAttr{Mtime: &mt}); err != nil {
		_ = n.p.Unlink(dir, name)
		return nil, err
	}
	if err := n.registerSymlink(in, id, rec.Version, rev, rec.Mtime); err != nil {
		_ = n.p.Unlink(dir, name)
		return nil, err
	}
	return in, nil
}

// Symlinked shares a symbolic link just made in the pool (symlink(2)): one
// commit makes its name and record visible to every node. On failure the
// caller removes the local link, so a link exists everywhere or nowhere
// but in the namespace: core.ErrExist when another node's file or link has
// the name, ErrCluster when etcd did not answer.
func (n *Node) Symlinked(ctx context.Context, dir *core.Inode, name string, in *core.Inode) error {
	if n == nil {
		return nil
	}
	ctx = uninterrupted(ctx)
	target, err := n.p.Readlink(in)
	if err != nil {
		return err
	}
	path := join(n.pathOf(dir), name)
	if path == "" || namespace.CleanPath(path) != nil {
		return nil // not a name the namespace can hold: stays local
	}
	a := in.Attr()
	rec := namespace.FileRecord{Version: 1, Size: int64(len(target)), Mode: namespace.ModeSymlink | 0o777,
		Mtime: a.Mtime.UnixNano(), UID: a.UID, GID: a.GID, Target: target}
	id := namespace.NewFileID()
	rev, err := n.ns.Commit(ctx, path, id, 0, rec, namespace.Chunks{})
	switch {
	case errors.Is(err, namespace.ErrExists), errors.Is(err, namespace.ErrIsDir):
		return fmt.Errorf("%w: symlink %s: %v", core.ErrExist, path, err)
	case err != nil:
		return ioErr("symlink "+path, err)
	}
	return n.registerSymlink(in, id, rec.Version, rev, rec.Mtime)
}

// registerSymlink records a shared symlink's state (the xattr, as a
// file's), so that its unlink and rename go through the namespace.
func (n *Node) registerSymlink(in *core.Inode, id namespace.FileID, ver namespace.Version, rev, mtime int64) error {
	f := &file{in: in, id: id, ver: ver, base: rev, mtime: mtime, crc: map[namespace.ChunkIdx]objstore.CRC32C{}}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := n.saveLocked(f); err != nil {
		return err
	}
	n.mu.Lock()
	n.files[in.Ino] = f
	n.byID[id] = f
	n.mu.Unlock()
	return nil
}

// resetLocked makes f the placeholder of version rec: its old chunks are
// discarded (truncated away), its size and attributes are the record's.
func (n *Node) resetLocked(f *file, rec namespace.FileRecord, rev int64) error {
	// A store of the old version's chunk must not write into the new one's
	// placeholder (nor past its size).
	if len(f.storing) > 0 {
		f.waitStoresLocked()
		if f.ver != 0 && rec.Version <= f.ver {
			return nil // another reset got there while this one waited
		}
	}
	old := f.ver
	zero, size := uint64(0), uint64(rec.Size)
	mt := rec.MtimeTime()
	mode := rec.Mode & format.ModePerm
	if err := n.p.Setattr(f.in, core.SetAttr{Size: &zero}); err != nil {
		return err
	}
	if err := n.p.Setattr(f.in, core.SetAttr{Size: &size, Mtime: &mt, Mode: &mode, UID: &rec.UID, GID: &rec.GID}); err != nil {
		return err
	}
	f.ver, f.base, f.cs, f.mtime = rec.Version, rev, rec.ChunkSize, rec.Mtime
	f.src = ""
	if isAttached(rec.Manifest) {
		f.src = rec.Manifest
	}
	f.present = namespace.Chunks{}
	f.crc = map[namespace.ChunkIdx]objstore.CRC32C{}
	f.dirty, f.changed = false, namespace.Chunks{}
	if old > 0 && old != rec.Version {
		go n.ns.DropHolding(n.ctx, f.id, old)
	}
	return n.saveLocked(f)
}

// revalidate is close-to-open: a newer committed version discards the
// local chunks. An unreachable etcd leaves the local file as it is.
func (n *Node) revalidate(ctx context.Context, f *file) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ver == 0 || f.dirty || f.writers > 0 || f.removed || n.away() {
		return
	}
	rec, rev, err := n.ns.File(ctx, f.id)
	if err != nil {
		return // gone (the name watch unlinks it) or etcd away: serve what is here
	}
	switch {
	case rec.Version > f.ver:
		if err := n.resetLocked(f, rec, rev); err != nil {
			n.log.Error("discarding an old version", zap.String("id", string(f.id)), zap.Error(err))
		}
		go n.invalidate(f.in.Ino)
	case rec.Version == f.ver && rev > f.base:
		n.applyMetaLocked(f, rec, rev)
		go n.invalidate(f.in.Ino)
	}
}

// applyMetaLocked takes a chmod, chown or utimes another node made of the
// version f has (SetMeta): the chunks stay, the attributes and the base of
// the next commit follow the record.
func (n *Node) applyMetaLocked(f *file, rec namespace.FileRecord, rev int64) {
	mt := rec.MtimeTime()
	mode := rec.Mode & format.ModePerm
	if err := n.p.Setattr(f.in, core.SetAttr{Mtime: &mt, Mode: &mode, UID: &rec.UID, GID: &rec.GID}); err != nil {
		n.log.Warn("taking another node's chmod/chown/utimes", zap.String("id", string(f.id)), zap.Error(err))
		return
	}
	f.base, f.mtime = rev, rec.Mtime
	if err := n.saveLocked(f); err != nil {
		n.log.Warn("saving the cluster state", zap.String("id", string(f.id)), zap.Error(err))
	}
}

// MetaChanged shares a chmod, chown or utimes just made in the pool of a
// committed cluster file (before: its attributes until then). A file this
// node writes takes them with its next commit. Otherwise one SetMeta
// changes the record in place, the version stays, and other nodes apply it
// from the file watch (or at their next open). When it fails the caller
// restores before: ErrWriterBusy while another node writes the file,
// ErrCluster when etcd did not answer.
func (n *Node) MetaChanged(ctx context.Context, in *core.Inode) error {
	if n == nil {
		return nil
	}
	ctx = uninterrupted(ctx)
	f := n.fileOf(in)
	if f == nil {
		return nil
	}
	f.mu.Lock()
	if f.ver == 0 || f.removed || f.writers > 0 || f.dirty {
		f.mu.Unlock()
		return nil // never committed, or its commit carries them
	}
	if f.src != "" {
		f.mu.Unlock()
		return fmt.Errorf("%w: an attached object", ErrReadOnly)
	}
	id, base := f.id, f.base
	f.mu.Unlock()
	a := in.Attr()
	m := namespace.Meta{Mode: a.Mode & format.ModePerm, UID: a.UID, GID: a.GID, Mtime: a.Mtime.UnixNano()}
	for try := 0; ; try++ {
		rec, rev, err := n.ns.SetMeta(ctx, id, base, m)
		switch {
		case err == nil:
			f.mu.Lock()
			if f.ver == rec.Version && rev > f.base {
				f.base, f.mtime = rev, rec.Mtime
				if err := n.saveLocked(f); err != nil {
					n.log.Warn("saving the cluster state", zap.String("id", string(f.id)), zap.Error(err))
				}
			}
			f.mu.Unlock()
			return nil
		case errors.Is(err, namespace.ErrWriterBusy):
			return fmt.Errorf("%w: %v", ErrWriterBusy, err)
		case errors.Is(err, namespace.ErrConflict) && try < 3:
			// Another node's SetMeta or commit came first: the change
			// applies on top of the record as it is now.
			_, rev, ferr := n.ns.File(ctx, id)
			if ferr != nil {
				return ioErr("setattr", ferr)
			}
			base = rev
		default:
			return ioErr("setattr", err)
		}
	}
}

// ---------------------------------------------------------------------
// Opens

// Open is the cluster's part of open(2): close-to-open for a reader; for a
// writer the writer lock (core.ErrBusy when another node holds it), then
// every chunk in the pool unless the open truncates. A nil Handle: a
// local-only file.
func (n *Node) Open(ctx context.Context, in *core.Inode, write, trunc bool) (*Handle, error) {
	ctx = uninterrupted(ctx)
	if n == nil || in.IsDir() || in.Mode()&format.ModeType != format.ModeReg {
		return nil, nil
	}
	f := n.fileOf(in)
	if f == nil && !write {
		return nil, nil
	}
	if f == nil {
		var err error
		if f, err = n.adopt(in); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	attached := f.src != ""
	f.mu.Unlock()
	if write && attached {
		return nil, fmt.Errorf("%w: an attached object", ErrReadOnly)
	}
	if !write {
		n.revalidate(ctx, f)
		f.mu.Lock()
		f.opens++
		f.mu.Unlock()
		return &Handle{f: f}, nil
	}
	// lockMu orders this node's takes and gives of the writer lock: a
	// close's give (in etcd) ends before the next open's take.
	f.lockMu.Lock()
	f.mu.Lock()
	first, ver := f.writers == 0, f.ver
	f.mu.Unlock()
	if first {
		w, err := n.ns.AcquireWriter(ctx, f.id)
		switch {
		case errors.Is(err, namespace.ErrWriterBusy):
			f.lockMu.Unlock()
			return nil, fmt.Errorf("%w: %v", ErrWriterBusy, err)
		case err != nil && ver > 0:
			f.lockMu.Unlock()
			return nil, ioErr("writer lock", err)
		case err != nil:
			// A file never committed has an id nobody knows: it is
			// written without the lock (its commit still requires that
			// no node holds it), so creating files does not need etcd.
			n.log.Debug("writing a new file without the writer lock", zap.String("id", string(f.id)), zap.Error(err))
		}
		f.mu.Lock()
		f.lock = w
		f.mu.Unlock()
	}
	f.mu.Lock()
	f.writers++
	f.opens++
	f.waitStoresLocked()
	f.mu.Unlock()
	f.lockMu.Unlock()
	h := &Handle{f: f, write: true}
	// Holding the lock, nobody commits: the version checked now is the
	// one this writer changes.
	n.revalidateWriter(ctx, f)
	if !trunc {
		if err := n.fillAll(ctx, f); err != nil {
			n.Release(h)
			return nil, err
		}
	}
	return h, nil
}

// revalidateWriter is revalidate for the first writer (it holds the lock).
func (n *Node) revalidateWriter(ctx context.Context, f *file) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ver == 0 || f.writers != 1 || f.changed.Len() > 0 {
		return
	}
	rec, rev, err := n.ns.File(ctx, f.id)
	switch {
	case err != nil:
	case rec.Version > f.ver:
		if err := n.resetLocked(f, rec, rev); err == nil {
			go n.invalidate(f.in.Ino)
		}
	case rec.Version == f.ver && rev > f.base:
		// Another node's chmod/chown/utimes: this writer's commit
		// compares against the record as it is now.
		n.applyMetaLocked(f, rec, rev)
		go n.invalidate(f.in.Ino)
	}
}

// Flush commits a writer's changes (close(2)); core.ErrIO when the commit
// failed.
func (n *Node) Flush(ctx context.Context, h *Handle) error {
	ctx = uninterrupted(ctx)
	if n == nil || h == nil || !h.write {
		return nil
	}
	return n.commit(ctx, h.f)
}

// Fsync commits the file if this node writes it.
func (n *Node) Fsync(ctx context.Context, in *core.Inode) error {
	ctx = uninterrupted(ctx)
	if n == nil {
		return nil
	}
	f := n.fileOf(in)
	if f == nil {
		return nil
	}
	f.mu.Lock()
	w := f.writers > 0
	f.mu.Unlock()
	if !w {
		return nil
	}
	return n.commit(ctx, f)
}

// Release ends an open: the last writer's close commits what is left and
// gives the writer lock up.
func (n *Node) Release(h *Handle) {
	if n == nil || h == nil {
		return
	}
	f := h.f
	if h.write {
		if err := n.commit(n.ctx, f); err != nil {
			n.log.Error("commit at release failed; the file's changes stay local", zap.String("id", string(f.id)), zap.Error(err))
		}
		f.lockMu.Lock()
		defer f.lockMu.Unlock()
	}
	f.mu.Lock()
	f.opens--
	recheck := f.opens == 0 && f.pending
	if recheck {
		f.pending = false
	}
	var w *namespace.Writer
	if h.write {
		f.writers--
		if f.writers == 0 {
			w, f.lock = f.lock, nil
		}
	}
	f.mu.Unlock()
	if w != nil {
		if err := w.Release(n.ctx); err != nil {
			n.log.Warn("releasing a writer lock (it ends with the node lease)", zap.String("id", string(f.id)), zap.Error(err))
		}
	}
	if recheck {
		go n.recheck(f)
	}
}

// recheck does what the watches left undone while f was open: a newer
// version replaces the local copy, a name removed (or given to another
// file) elsewhere goes here too.
func (n *Node) recheck(f *file) {
	release, ok := n.usePool()
	if !ok {
		return
	}
	defer release()
	n.revalidate(n.ctx, f)
	path := n.pathOf(f.in)
	if path == "" {
		return
	}
	id, err := n.ns.Lookup(n.ctx, path)
	if err == nil && id == f.id || err != nil && !errors.Is(err, namespace.ErrNotFound) {
		return // still named so, or etcd cannot say
	}
	n.names.Lock()
	dir, name, ok := n.parentOf(path)
	var dropped bool
	if ok {
		if in, err := n.p.Lookup(dir, name); err == nil && in == f.in {
			f.mu.Lock()
			idle := f.opens == 0 && !f.dirty
			f.mu.Unlock()
			if idle && n.p.Unlink(dir, name) == nil {
				n.Unlinked(in)
				dropped = true
			}
		}
	}
	n.names.Unlock()
	if dropped {
		n.invalidateEntry(dir.Ino, name)
	}
}

// Wrote records a change of [off, off+length) of a cluster file.
func (n *Node) Wrote(in *core.Inode, off, length int64) {
	if n == nil || length <= 0 {
		return
	}
	f := n.fileOf(in)
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dirty = true
	cs := f.cs
	if cs <= 0 {
		cs = n.ns.ChunkSize()
	}
	for i := off / cs; i <= (off+length-1)/cs; i++ {
		f.changed.Add(namespace.ChunkIdx(i))
	}
}

// Truncate runs local, a truncate(2) of in to size, as a writer of a
// committed cluster file that no handle on this node writes: the writer
// lock, the chunks the new size keeps (none for 0), local, then one commit,
// so the other nodes see the new size at once rather than with some later
// writer's close. A file this node writes (ftruncate, or truncate(2) while
// it is open for writing) commits it with its writer's fsync or close, as
// any write. Errors: ErrWriterBusy while another node writes the file,
// ErrReadOnly for an attached object, ErrCluster when a step failed (the
// local truncate may be done then: it is committed by the next writer).
func (n *Node) Truncate(ctx context.Context, in *core.Inode, size int64, local func() error) error {
	if n == nil {
		return local()
	}
	ctx = uninterrupted(ctx)
	old := int64(in.Attr().Size)
	f := n.fileOf(in)
	if f == nil {
		return local()
	}
	f.mu.Lock()
	own := f.ver == 0 || f.writers > 0
	attached := f.src != ""
	f.mu.Unlock()
	if attached {
		return fmt.Errorf("%w: an attached object", ErrReadOnly)
	}
	if own {
		if err := local(); err != nil {
			return err
		}
		n.Resized(in, old, size)
		return nil
	}
	h, err := n.Open(ctx, in, true, size == 0)
	if err != nil {
		return err
	}
	defer n.Release(h)
	if err := local(); err != nil {
		return err
	}
	n.Resized(in, old, size)
	return n.Flush(ctx, h)
}

// Resized records a size change (truncate, O_TRUNC, fallocate) of a
// cluster file.
func (n *Node) Resized(in *core.Inode, oldSize, newSize int64) {
	if n == nil || oldSize == newSize {
		return
	}
	lo, hi := min(oldSize, newSize), max(oldSize, newSize)
	n.Wrote(in, lo, max(hi-lo, 1))
}

// ---------------------------------------------------------------------
// Reads

// Fill brings the chunks of [off, off+length) that are not in the pool
// yet, before a read serves them from it.
func (n *Node) Fill(ctx context.Context, in *core.Inode, off, length int64) error {
	ctx = uninterrupted(ctx)
	if n == nil || length <= 0 {
		return nil
	}
	f := n.fileOf(in)
	if f == nil {
		return nil
	}
	f.mu.Lock()
	ver, cs, size := f.ver, f.cs, int64(in.Attr().Size)
	f.mu.Unlock()
	if ver == 0 || cs <= 0 || off >= size {
		return nil
	}
	end := min(off+length, size)
	last := (end - 1) / cs
	for i := off / cs; i <= last; i++ {
		if err := n.fillChunk(ctx, f, namespace.ChunkIdx(i)); err != nil {
			return err
		}
	}
	n.readAhead(f, last+1, size, cs)
	return nil
}

// readAhead starts fetching up to readAheadChunks chunks from next on
// (one goroutine per chunk, not one per read), while the reader reads the
// chunks it waited for: a sequential load then keeps several fetches in
// flight, from different holders. The node runs at most
// maxReadAheadFetches at once, so readers of many files do not hold
// gigabytes of chunks in flight; a read-ahead that finds no slot is
// started by a later read.
func (n *Node) readAhead(f *file, next, size, cs int64) {
	for i := next; i < next+readAheadChunks && i*cs < size; i++ {
		c := namespace.ChunkIdx(i)
		f.mu.Lock()
		start := !f.present.Has(c) && !f.ahead.Has(c) && f.storing[c] == nil
		if start {
			select {
			case n.aheadSlots <- struct{}{}:
				f.ahead.Add(c)
			default:
				start = false
			}
		}
		f.mu.Unlock()
		if !start {
			continue
		}
		go func() {
			if err := n.fillChunk(n.ctx, f, c); err != nil {
				n.log.Debug("read-ahead", zap.Error(err))
			}
			f.mu.Lock()
			f.ahead.Remove(c)
			f.mu.Unlock()
			<-n.aheadSlots
		}()
	}
}

func (n *Node) fillAll(ctx context.Context, f *file) error {
	f.mu.Lock()
	cs, size := f.cs, int64(f.in.Attr().Size)
	ver := f.ver
	f.mu.Unlock()
	if ver == 0 || cs <= 0 {
		return nil
	}
	for i := int64(0); i*cs < size; i++ {
		if err := n.fillChunk(ctx, f, namespace.ChunkIdx(i)); err != nil {
			return err
		}
	}
	return nil
}

// fillChunk fetches chunk i of f's version unless it is present (or was
// changed locally, whose bytes are the writer's), and returns once it is
// in the pool.
func (n *Node) fillChunk(ctx context.Context, f *file, i namespace.ChunkIdx) error {
	f.mu.Lock()
	if f.present.Has(i) || f.changed.Has(i) || f.inflight.Has(i) || f.ver == 0 {
		f.mu.Unlock()
		return nil
	}
	ref := objstore.ChunkRef{File: objstore.FileID(f.id), Ver: objstore.Version(f.ver), Idx: objstore.ChunkIdx(i)}
	f.mu.Unlock()
	data, src, err := n.peer.Fetch(ctx, ref)
	n.log.Debug("chunk fetched", zap.Stringer("chunk", ref), zap.Stringer("source", src), zap.Error(err))
	if err != nil {
		return ioErr(fmt.Sprintf("fetching chunk %s", ref), err)
	}
	// Fetch stored it through StoreChunk (then the checksum is not taken
	// again); when it came from the memory cache, or StoreChunk could not,
	// it goes in now.
	return n.storeInFile(f, ref, data, func() objstore.CRC32C { return objstore.Checksum(data) })
}

// storeInFile writes a verified chunk into f if f is still at its version,
// and returns once the chunk is in the pool (stored by this call or by a
// concurrent one). The bytes are written and flushed without f.mu held;
// crc is called only when the chunk is written.
func (n *Node) storeInFile(f *file, ref objstore.ChunkRef, data []byte, crc func() objstore.CRC32C) error {
	release, ok := n.usePool()
	if !ok {
		return fmt.Errorf("%w: chunk %s: unmounting", ErrCluster, ref)
	}
	defer release()
	n.roomFor(f, ref, int64(len(data))) // the low watermark (evict.go)
	i := namespace.ChunkIdx(ref.Idx)
	f.mu.Lock()
	for {
		if objstore.Version(f.ver) != ref.Ver || f.removed {
			f.mu.Unlock()
			return fmt.Errorf("%w: chunk %s: the file moved on to version %d", ErrCluster, ref, f.ver)
		}
		if f.present.Has(i) || f.changed.Has(i) || f.inflight.Has(i) {
			f.mu.Unlock()
			return nil
		}
		ch := f.storing[i]
		if ch == nil {
			break
		}
		f.mu.Unlock()
		<-ch // another store of it: its outcome decides
		f.mu.Lock()
	}
	if f.storing == nil {
		f.storing = map[namespace.ChunkIdx]chan struct{}{}
	}
	done := make(chan struct{})
	f.storing[i] = done
	off := int64(ref.Idx) * f.cs
	f.mu.Unlock()
	sum := crc()
	_, err := n.writeChunk(f, off, data) // evicts and retries on ENOSPC (evict.go)
	if err == nil {
		// The bytes are durable before the state says they are present.
		err = n.p.Fsync(f.in)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.storing, i)
	close(done)
	if err != nil {
		return err
	}
	if objstore.Version(f.ver) != ref.Ver || f.removed || f.changed.Has(i) || f.inflight.Has(i) {
		// Reset to a newer version (which drops what was present) or
		// written meanwhile: these bytes are not the chunk of any state.
		return nil
	}
	// The fill is no change of the file: its mtime stays the committed one.
	mt := time.Unix(0, f.mtime)
	if err := n.p.Setattr(f.in, core.SetAttr{Mtime: &mt}); err != nil {
		return err
	}
	f.present.Add(i)
	f.crc[i] = sum
	n.used(f, i)
	n.cache.drop(ref)
	if err := n.saveLocked(f); err != nil {
		return err
	}
	n.ns.AddHolding(f.id, f.ver, i)
	return nil
}

// ---------------------------------------------------------------------
// peer.Local on the pool

type local struct{ n *Node }

func (l local) ReadChunk(ref objstore.ChunkRef, off, length int64) ([]byte, int64, objstore.CRC32C, bool) {
	n := l.n
	release, ok := n.usePool()
	if !ok {
		return nil, 0, 0, false // not started, or closing
	}
	defer release()
	n.mu.Lock()
	f := n.byID[namespace.FileID(ref.File)]
	n.mu.Unlock()
	if f != nil {
		if b, size, crc, ok := n.readFileChunk(f, ref, off, length); ok {
			return b, size, crc, true
		}
	}
	e, ok := n.cache.get(ref)
	if !ok {
		return nil, 0, 0, false
	}
	size := int64(len(e.data))
	off = min(max(off, 0), size)
	end := size
	if length >= 0 {
		end = min(off+length, size)
	}
	return e.data[off:end], size, e.crc, true
}

// readFileChunk reads a chunk from the pool file when it holds exactly that
// version's chunk. The copy is made without f.mu held (reads and stores of
// other chunks go on); a reset of the file meanwhile makes it not ok.
func (n *Node) readFileChunk(f *file, ref objstore.ChunkRef, off, length int64) ([]byte, int64, objstore.CRC32C, bool) {
	i := namespace.ChunkIdx(ref.Idx)
	f.mu.Lock()
	if objstore.Version(f.ver) != ref.Ver || !f.present.Has(i) || f.changed.Has(i) || f.inflight.Has(i) || f.removed {
		f.mu.Unlock()
		return nil, 0, 0, false
	}
	fsize := int64(f.in.Attr().Size)
	start := int64(ref.Idx) * f.cs
	size := min(f.cs, fsize-start)
	crc, haveCRC := f.crc[i]
	f.mu.Unlock()
	if size <= 0 {
		return nil, 0, 0, false
	}
	off = min(max(off, 0), size)
	end := size
	if length >= 0 {
		end = min(off+length, size)
	}
	var b []byte
	if !haveCRC {
		// The checksum needs the whole chunk: the range is served from
		// that copy rather than read a second time.
		whole := make([]byte, size)
		if k, err := n.p.ReadAt(f.in, whole, start); err != nil || int64(k) != size {
			return nil, 0, 0, false
		}
		crc = objstore.Checksum(whole)
		b = whole[off:end]
	} else {
		b = make([]byte, end-off)
		if k, err := n.p.ReadAt(f.in, b, start+off); err != nil || k != len(b) {
			return nil, 0, 0, false
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if objstore.Version(f.ver) != ref.Ver || !f.present.Has(i) || f.changed.Has(i) || f.inflight.Has(i) || f.removed {
		return nil, 0, 0, false // reset or written while it was read
	}
	if !haveCRC {
		f.crc[i] = crc
	}
	n.used(f, i) // served: as recently used as a local read (evict.go)
	return b, size, crc, true
}

func (l local) StoreChunk(ref objstore.ChunkRef, data []byte, crc objstore.CRC32C) error {
	n := l.n
	n.mu.Lock()
	f := n.byID[namespace.FileID(ref.File)]
	n.mu.Unlock()
	if f != nil && n.storeInFile(f, ref, data, func() objstore.CRC32C { return crc }) == nil {
		return nil
	}
	for _, gone := range n.cache.put(ref, data, crc) {
		n.ns.RemoveHolding(namespace.FileID(gone.File), namespace.Version(gone.Ver), namespace.ChunkIdx(gone.Idx))
	}
	return nil
}

// ---------------------------------------------------------------------
// Commits

// commit makes the writer's changes the file's next version: changed
// chunks, then the manifest, then the one namespace transaction. Any
// failure is core.ErrIO and nothing of it is visible.
func (n *Node) commit(ctx context.Context, f *file) error {
	f.commitMu.Lock()
	defer f.commitMu.Unlock()
	f.mu.Lock()
	if !f.dirty || f.removed {
		f.mu.Unlock()
		return nil
	}
	// Writes during the upload are the next commit's: they go to a fresh
	// changed set, and a failed commit puts these back.
	snap := f.changed
	f.changed, f.inflight, f.dirty = namespace.Chunks{}, snap.Clone(), false
	ver, base, cs, id := f.ver, f.base, f.cs, f.id
	f.mu.Unlock()
	err := n.upload(ctx, f, id, ver, base, cs, snap)
	f.mu.Lock()
	f.inflight = namespace.Chunks{}
	if err != nil {
		f.changed.Union(snap)
		f.dirty = true
	}
	f.mu.Unlock()
	return err
}

// upload is commit's work, without f.mu: the changed chunks, the manifest,
// then the namespace transaction; on success f is the new version.
func (n *Node) upload(ctx context.Context, f *file, id namespace.FileID, ver namespace.Version, base, cs int64, changed namespace.Chunks) error {
	path := n.pathOf(f.in)
	if path == "" {
		return nil // unlinked: nothing to name
	}
	a := f.in.Attr()
	size := int64(a.Size)
	if cs <= 0 {
		cs = n.ns.ChunkSize()
	}
	nch := objstore.Chunks(size, cs)
	var old *objstore.Manifest
	if ver > 0 {
		var err error
		if old, err = n.cat.manifests.Manifest(ctx, objstore.FileID(id), objstore.Version(ver)); err != nil || old.ChunkSize != cs {
			old = nil // every chunk goes up again
		}
	}
	next := ver + 1
	m := &objstore.Manifest{FSID: n.store.FSID(), ID: objstore.FileID(id), Version: objstore.Version(next),
		Size: size, ChunkSize: cs, Chunks: make([]objstore.ChunkEntry, nch)}
	buf := make([]byte, min(cs, max(size, 1)))
	crcs := map[namespace.ChunkIdx]objstore.CRC32C{}
	for i := int64(0); i < nch; i++ {
		clen := min(cs, size-i*cs)
		idx := namespace.ChunkIdx(i)
		if old != nil && i < int64(len(old.Chunks)) && old.Chunks[i].Size == clen && !changed.Has(idx) {
			m.Chunks[i] = old.Chunks[i] // unchanged: the older object
			crcs[idx] = old.Chunks[i].CRC32C
			continue
		}
		b := buf[:clen]
		if k, err := n.p.ReadAt(f.in, b, i*cs); err != nil || int64(k) != clen {
			return ioErr("commit "+path+": reading the file", fmt.Errorf("%d of %d bytes: %v", k, clen, err))
		}
		e, err := n.store.PutChunk(ctx, objstore.ChunkRef{File: objstore.FileID(id), Ver: objstore.Version(next), Idx: objstore.ChunkIdx(i)}, b)
		if err != nil {
			return ioErr("commit "+path, err)
		}
		m.Chunks[i] = e
		crcs[idx] = e.CRC32C
	}
	key, err := n.store.PutManifest(ctx, m)
	if err != nil {
		return ioErr("commit "+path, err)
	}
	rec := namespace.FileRecord{Version: next, Size: size, ChunkSize: cs, Manifest: key,
		Mode: a.Mode, Mtime: a.Mtime.UnixNano(), UID: a.UID, GID: a.GID}
	held := namespace.ChunkRange(0, namespace.ChunkIdx(nch))
	rev, err := n.ns.Commit(ctx, path, id, base, rec, held)
	if err != nil {
		return ioErr("commit "+path, err)
	}
	n.cat.manifests.Add(m)
	f.mu.Lock()
	f.ver, f.base, f.cs, f.mtime = next, rev, cs, rec.Mtime
	f.present, f.crc = held, crcs
	if err := n.saveLocked(f); err != nil {
		n.log.Error("saving the cluster state after a commit", zap.String("path", path), zap.Error(err))
	}
	f.mu.Unlock()
	if ver > 0 {
		go n.ns.DropHolding(n.ctx, id, ver)
	}
	return nil
}

// ---------------------------------------------------------------------
// Unlink and rename

// Unlink removes a name: a committed file's from the namespace first
// (ErrCluster when etcd refuses: then neither goes), then the pool's
// (local, core's unlink).
func (n *Node) Unlink(ctx context.Context, dir *core.Inode, name string, local func() error) error {
	if n == nil {
		return local()
	}
	ctx = uninterrupted(ctx)
	n.names.Lock()
	defer n.names.Unlock()
	in, err := n.p.Lookup(dir, name)
	if err != nil {
		return local()
	}
	if f := n.fileOf(in); f != nil {
		f.mu.Lock()
		committed := f.ver > 0
		f.mu.Unlock()
		if committed {
			path := join(n.pathOf(dir), name)
			if err := n.ns.Remove(ctx, path); err != nil && !errors.Is(err, namespace.ErrNotFound) {
				return ioErr("unlink "+path, err)
			}
		}
	}
	if err := local(); err != nil {
		return err
	}
	n.Unlinked(in)
	return nil
}

// Unlinked drops the state of a file whose last name went.
func (n *Node) Unlinked(in *core.Inode) {
	if n == nil || in == nil {
		return
	}
	a := in.Attr()
	if a.Nlink > 0 {
		return
	}
	f := n.fileOf(in)
	if f == nil {
		return
	}
	f.mu.Lock()
	f.removed = true
	ver := f.ver
	f.mu.Unlock()
	n.forget(f)
	if ver > 0 {
		go n.ns.DropHolding(n.ctx, f.id, ver)
	}
}

// Rename moves a name: in the namespace first (a committed file, or a
// directory with committed names below it; ErrCluster when etcd refuses),
// then in the pool (local, core's rename).
func (n *Node) Rename(ctx context.Context, dir *core.Inode, name string, newDir *core.Inode, newName string, local func() error) error {
	if n == nil {
		return local()
	}
	ctx = uninterrupted(ctx)
	n.names.Lock()
	defer n.names.Unlock()
	in, err := n.p.Lookup(dir, name)
	if err != nil {
		return n.renameLocal(newDir, newName, local)
	}
	if !in.IsDir() {
		f := n.fileOf(in)
		if f == nil {
			return n.renameLocal(newDir, newName, local)
		}
		f.mu.Lock()
		committed := f.ver > 0
		f.mu.Unlock()
		if !committed {
			return n.renameLocal(newDir, newName, local)
		}
	}
	oldPath, newPath := join(n.pathOf(dir), name), join(n.pathOf(newDir), newName)
	if err := n.ns.Rename(ctx, oldPath, newPath); err != nil && !errors.Is(err, namespace.ErrNotFound) {
		return ioErr("rename "+oldPath, err)
	}
	return n.renameLocal(newDir, newName, local)
}

// renameLocal runs the pool's rename and forgets a file it replaced.
func (n *Node) renameLocal(newDir *core.Inode, newName string, local func() error) error {
	replaced, _ := n.p.Lookup(newDir, newName)
	if err := local(); err != nil {
		return err
	}
	if replaced != nil {
		n.Unlinked(replaced) // its state goes with its last name
	}
	return nil
}

// ---------------------------------------------------------------------
// Watches

// fileEvent: a commit elsewhere makes an idle local copy the placeholder of
// the new version; an open one is revalidated at its next open.
func (n *Node) fileEvent(ev namespace.FileEvent) {
	if ev.ID == "" || ev.Deleted {
		return
	}
	release, ok := n.usePool()
	if !ok {
		return
	}
	defer release()
	n.mu.Lock()
	f := n.byID[ev.ID]
	n.mu.Unlock()
	if f == nil {
		return
	}
	f.mu.Lock()
	stale := ev.Record.Version > f.ver && f.ver > 0
	meta := ev.Record.Version == f.ver && f.ver > 0 && ev.Rev > f.base
	switch {
	case stale && f.opens == 0 && !f.dirty:
		if err := n.resetLocked(f, ev.Record, ev.Rev); err != nil {
			n.log.Warn("discarding an old version", zap.String("id", string(f.id)), zap.Error(err))
		}
	case meta && f.writers == 0 && !f.dirty:
		n.applyMetaLocked(f, ev.Record, ev.Rev)
	case stale, meta:
		f.pending = true // at the last close
	}
	f.mu.Unlock()
	if stale || meta {
		n.invalidate(f.in.Ino)
	}
}

// nameEvent: a name removed or replaced elsewhere goes here too (when the
// local file is a committed, idle copy); the kernel forgets the entry.
func (n *Node) nameEvent(ev namespace.NameEvent) {
	if ev.Path == "" {
		return
	}
	release, ok := n.usePool()
	if !ok {
		return
	}
	defer release()
	dirIno, name, dropped := n.applyNameEvent(ev)
	if dirIno != 0 {
		n.invalidateEntry(dirIno, name) // after names is unlocked: the kernel may be waiting on it
	}
	if dropped != nil {
		n.invalidate(dropped.Ino)
	}
}

func (n *Node) applyNameEvent(ev namespace.NameEvent) (core.Ino, string, *core.Inode) {
	n.names.Lock()
	defer n.names.Unlock()
	dir, name, ok := n.parentOf(ev.Path)
	if !ok {
		return 0, "", nil
	}
	in, err := n.p.Lookup(dir, name)
	if err != nil {
		return dir.Ino, name, nil
	}
	f := n.fileOf(in)
	if f == nil {
		return dir.Ino, name, nil
	}
	f.mu.Lock()
	gone := f.ver > 0 && (ev.Deleted || ev.ID != f.id)
	drop := gone && f.opens == 0 && !f.dirty
	if gone && !drop {
		f.pending = true // at the last close
	}
	f.mu.Unlock()
	if !drop {
		return dir.Ino, name, nil
	}
	if err := n.p.Unlink(dir, name); err != nil {
		n.log.Debug("dropping a name removed elsewhere", zap.String("path", ev.Path), zap.Error(err))
		return dir.Ino, name, nil
	}
	n.Unlinked(in)
	return dir.Ino, name, in
}

// ---------------------------------------------------------------------
// Warm-up (dnnfs warmup)

// WarmInfo describes the version of a cluster file warm-up brings.
type WarmInfo struct {
	Version   uint64 `json:"version"`
	Size      int64  `json:"size"`
	ChunkSize int64  `json:"chunk_size"`
	Chunks    int64  `json:"chunks"`
}

// ErrNotShared: warm-up of a file that is not a committed cluster file.
var ErrNotShared = errors.New("not a committed cluster file")

// WarmInfo returns the committed version of in (close-to-open: a newer one
// replaces the local copy first).
func (n *Node) WarmInfo(ctx context.Context, in *core.Inode) (WarmInfo, error) {
	if n == nil {
		return WarmInfo{}, ErrNotShared
	}
	ctx = uninterrupted(ctx)
	f := n.fileOf(in)
	if f == nil {
		return WarmInfo{}, ErrNotShared
	}
	n.revalidate(ctx, f)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ver == 0 || f.cs <= 0 {
		return WarmInfo{}, ErrNotShared
	}
	size := int64(in.Attr().Size)
	return WarmInfo{Version: uint64(f.ver), Size: size, ChunkSize: f.cs, Chunks: objstore.Chunks(size, f.cs)}, nil
}

// Warm has chunk i of in's version pulled into its home node's pool (which
// may be this node) without bringing it here, unless some pool holds it.
func (n *Node) Warm(ctx context.Context, in *core.Inode, i int64) error {
	if n == nil {
		return ErrNotShared
	}
	ctx = uninterrupted(ctx)
	f := n.fileOf(in)
	if f == nil {
		return ErrNotShared
	}
	f.mu.Lock()
	ver, cs, present := f.ver, f.cs, f.present.Has(namespace.ChunkIdx(i))
	f.mu.Unlock()
	if ver == 0 || cs <= 0 || i < 0 || i*cs >= int64(in.Attr().Size) {
		return fmt.Errorf("%w: chunk %d", ErrNotShared, i)
	}
	if present {
		return nil
	}
	ref := objstore.ChunkRef{File: objstore.FileID(f.id), Ver: objstore.Version(ver), Idx: objstore.ChunkIdx(i)}
	if hs, err := n.ns.Holders(ctx, f.id, ver, namespace.ChunkIdx(i)); err == nil && len(hs) > 0 {
		return nil // already in a pool
	}
	if _, err := n.peer.Warm(ctx, ref); err != nil {
		return ioErr("warm-up", err)
	}
	return nil
}
