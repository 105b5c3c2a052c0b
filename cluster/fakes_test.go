package cluster

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/cluster/peer"
	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/internal/pooltest"
)

// The unit tests of the file logic run a real Node on a real pool (core on
// a memory medium) and a real peer tier, with the network services faked:
// world is etcd and S3 in memory, seen by each node through a fakeNS
// (nsClient), a fakeS3 (objStore) and a fakeCatalog (manifestCatalog);
// another node's chunk server is a real peer.Peer over HTTP whose
// peer.Local serves the world's objects.

const testCS = 64 << 10 // the chunk size of the tests' cluster

type worldFile struct {
	rec namespace.FileRecord
	rev int64
}

type world struct {
	mu        sync.Mutex
	rev       int64
	names     map[string]namespace.FileID
	files     map[namespace.FileID]worldFile
	writers   map[namespace.FileID]namespace.NodeID
	holdings  map[namespace.NodeID]map[namespace.FileVersion]namespace.Chunks
	nodes     map[namespace.NodeID]string // peer URLs
	objects   map[string][]byte
	manifests map[string]*objstore.Manifest // by "id/ver"
	etcdDown  bool                          // every namespace call fails (ErrUnavailable)
	s3Down    bool                          // every PUT fails (ErrUnreachable)
	calls     []string                      // namespace and S3 changes, in order
	// putGate, when set, holds every PutChunk until it is closed;
	// putStarted is closed at the first one that waits.
	putGate, putStarted chan struct{}
	// onServe, when set, runs (without mu) before another node's chunk
	// server reads a chunk of the world's objects.
	onServe func(ref objstore.ChunkRef)
	// onCommit, when set, runs (without mu) at the start of a Commit.
	onCommit  func(path string)
	dropFails bool // DropHolding fails (ErrUnavailable)
}

// holdPuts makes PutChunk wait until the returned function is called; the
// channel closes when the first PutChunk is waiting.
func (w *world) holdPuts() (started <-chan struct{}, release func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.putGate, w.putStarted = make(chan struct{}), make(chan struct{})
	gate := w.putGate
	return w.putStarted, func() { close(gate) }
}

const testFSID = "0123456789abcdef0123456789abcdef"

func newWorld() *world {
	return &world{rev: 1, names: map[string]namespace.FileID{}, files: map[namespace.FileID]worldFile{},
		writers: map[namespace.FileID]namespace.NodeID{}, holdings: map[namespace.NodeID]map[namespace.FileVersion]namespace.Chunks{},
		nodes: map[namespace.NodeID]string{}, objects: map[string][]byte{}, manifests: map[string]*objstore.Manifest{}}
}

func manifestKey(id objstore.FileID, ver objstore.Version) string {
	return fmt.Sprintf("%s/%s/%d/manifest", testFSID, id, ver)
}

func (w *world) note(format string, args ...any) {
	w.calls = append(w.calls, fmt.Sprintf(format, args...))
}

// callLog returns the changes made so far and forgets them.
func (w *world) callLog() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.calls
	w.calls = nil
	return c
}

func (w *world) set(fn func(w *world)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fn(w)
}

// isDirLocked: names below path imply a directory.
func (w *world) isDirLocked(path string) bool {
	for p := range w.names {
		if path == "" || strings.HasPrefix(p, path+"/") {
			return true
		}
	}
	return false
}

// commitAs commits data as the next version of path by node (a new file
// when path names none), as another daemon's commit would: its chunk
// objects, its manifest, then the records (node holds every chunk).
func (w *world) commitAs(node namespace.NodeID, path string, data []byte) (namespace.FileID, namespace.FileRecord, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	id, ok := w.names[path]
	if !ok {
		id = namespace.NewFileID()
	}
	ver := w.files[id].rec.Version + 1
	size := int64(len(data))
	m := &objstore.Manifest{FSID: testFSID, ID: objstore.FileID(id), Version: objstore.Version(ver), Size: size,
		ChunkSize: testCS, Chunks: make([]objstore.ChunkEntry, objstore.Chunks(size, testCS))}
	for i := range m.Chunks {
		b := data[int64(i)*testCS : min(int64(i+1)*testCS, size)]
		key := fmt.Sprintf("%s/%s/%d/%08d", testFSID, id, ver, i)
		w.objects[key] = append([]byte(nil), b...)
		m.Chunks[i] = objstore.ChunkEntry{Key: key, Size: int64(len(b)), CRC32C: objstore.Checksum(b)}
	}
	w.manifests[manifestKey(m.ID, m.Version)] = m
	w.rev++
	rec := namespace.FileRecord{Version: ver, Size: size, ChunkSize: testCS, Manifest: manifestKey(m.ID, m.Version),
		Mode: 0o644, Mtime: int64(w.rev) * 1e9}
	w.files[id] = worldFile{rec, w.rev}
	w.names[path] = id
	w.holdLocked(node, id, ver, namespace.ChunkRange(0, namespace.ChunkIdx(len(m.Chunks))))
	return id, rec, w.rev
}

func (w *world) holdLocked(node namespace.NodeID, id namespace.FileID, ver namespace.Version, c namespace.Chunks) {
	if w.holdings[node] == nil {
		w.holdings[node] = map[namespace.FileVersion]namespace.Chunks{}
	}
	fv := namespace.FileVersion{File: id, Ver: ver}
	all := w.holdings[node][fv].Clone()
	all.Union(c)
	w.holdings[node][fv] = all
}

// fakeNS is one node's view of the world's etcd (nsClient).
type fakeNS struct {
	w    *world
	self namespace.NodeID
}

func (ns *fakeNS) lock() error {
	ns.w.mu.Lock()
	if ns.w.etcdDown {
		ns.w.mu.Unlock()
		return fmt.Errorf("%w: fake etcd down", namespace.ErrUnavailable)
	}
	return nil
}

func (ns *fakeNS) FSID() namespace.FSID { return testFSID }
func (ns *fakeNS) ChunkSize() int64     { return testCS }
func (ns *fakeNS) Close() error         { return nil }

func (ns *fakeNS) Lease() int64 {
	ns.w.mu.Lock()
	defer ns.w.mu.Unlock()
	if ns.w.etcdDown {
		return 0
	}
	return 1
}

func (ns *fakeNS) Nodes() []namespace.NodeInfo {
	ns.w.mu.Lock()
	defer ns.w.mu.Unlock()
	var out []namespace.NodeInfo
	for id, url := range ns.w.nodes {
		out = append(out, namespace.NodeInfo{ID: id, Peer: url})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (ns *fakeNS) Stat(ctx context.Context, path string) (namespace.FileID, namespace.FileRecord, int64, error) {
	if err := ns.lock(); err != nil {
		return "", namespace.FileRecord{}, 0, err
	}
	defer ns.w.mu.Unlock()
	id, ok := ns.w.names[path]
	switch {
	case ok:
		f := ns.w.files[id]
		return id, f.rec, f.rev, nil
	case ns.w.isDirLocked(path):
		return "", namespace.FileRecord{}, 0, namespace.ErrIsDir
	}
	return "", namespace.FileRecord{}, 0, fmt.Errorf("%w: %s", namespace.ErrNotFound, path)
}

func (ns *fakeNS) Lookup(ctx context.Context, path string) (namespace.FileID, error) {
	id, _, _, err := ns.Stat(ctx, path)
	return id, err
}

func (ns *fakeNS) List(ctx context.Context, dir string) ([]namespace.Entry, error) {
	if err := ns.lock(); err != nil {
		return nil, err
	}
	defer ns.w.mu.Unlock()
	seen := map[string]bool{}
	var out []namespace.Entry
	for p, id := range ns.w.names {
		rest, ok := strings.CutPrefix(p, dir+"/")
		if dir == "" {
			rest, ok = p, true
		}
		if !ok {
			continue
		}
		name, below, isDir := strings.Cut(rest, "/")
		_ = below
		if !seen[name] {
			seen[name] = true
			e := namespace.Entry{Name: name, Dir: isDir}
			if !isDir {
				e.ID = id
			}
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil, namespace.ErrNotFound
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (ns *fakeNS) File(ctx context.Context, id namespace.FileID) (namespace.FileRecord, int64, error) {
	if err := ns.lock(); err != nil {
		return namespace.FileRecord{}, 0, err
	}
	defer ns.w.mu.Unlock()
	f, ok := ns.w.files[id]
	if !ok {
		return namespace.FileRecord{}, 0, fmt.Errorf("%w: file %s", namespace.ErrNotFound, id)
	}
	return f.rec, f.rev, nil
}

// writerBusyLocked: another node holds id's writer lock.
func (ns *fakeNS) writerBusyLocked(id namespace.FileID) error {
	if w := ns.w.writers[id]; w != "" && w != ns.self {
		return fmt.Errorf("%w: node %s", namespace.ErrWriterHeld, w)
	}
	return nil
}

func (ns *fakeNS) Commit(ctx context.Context, path string, id namespace.FileID, base int64, rec namespace.FileRecord, held namespace.Chunks) (int64, error) {
	ns.w.mu.Lock()
	cb := ns.w.onCommit
	ns.w.mu.Unlock()
	if cb != nil {
		cb(path)
	}
	if err := ns.lock(); err != nil {
		return 0, err
	}
	defer ns.w.mu.Unlock()
	cur, exists := ns.w.files[id]
	switch {
	case exists && cur.rev != base, !exists && base != 0:
		return 0, fmt.Errorf("%w: commit %s", namespace.ErrConflict, path)
	case base == 0 && ns.w.names[path] != "":
		return 0, fmt.Errorf("%w: commit %s", namespace.ErrExists, path)
	case base == 0 && ns.w.isDirLocked(path):
		return 0, namespace.ErrIsDir
	}
	if err := ns.writerBusyLocked(id); err != nil {
		return 0, err
	}
	ns.w.rev++
	ns.w.files[id] = worldFile{rec, ns.w.rev}
	if base == 0 {
		ns.w.names[path] = id
	}
	ns.w.holdLocked(ns.self, id, rec.Version, held)
	ns.w.note("commit %s v%d", path, rec.Version)
	return ns.w.rev, nil
}

func (ns *fakeNS) SetMeta(ctx context.Context, id namespace.FileID, base int64, m namespace.Meta) (namespace.FileRecord, int64, error) {
	if err := ns.lock(); err != nil {
		return namespace.FileRecord{}, 0, err
	}
	defer ns.w.mu.Unlock()
	cur, ok := ns.w.files[id]
	switch {
	case !ok:
		return namespace.FileRecord{}, 0, namespace.ErrNotFound
	case cur.rev != base:
		return namespace.FileRecord{}, 0, namespace.ErrConflict
	}
	if err := ns.writerBusyLocked(id); err != nil {
		return namespace.FileRecord{}, 0, err
	}
	rec := cur.rec
	rec.Mode, rec.UID, rec.GID, rec.Mtime = rec.Mode&namespace.ModeTypeMask|m.Mode, m.UID, m.GID, m.Mtime
	ns.w.rev++
	ns.w.files[id] = worldFile{rec, ns.w.rev}
	ns.w.note("setmeta %s %#o", id, m.Mode)
	return rec, ns.w.rev, nil
}

func (ns *fakeNS) Remove(ctx context.Context, path string) error {
	if err := ns.lock(); err != nil {
		return err
	}
	defer ns.w.mu.Unlock()
	id, ok := ns.w.names[path]
	if !ok {
		return namespace.ErrNotFound
	}
	delete(ns.w.names, path)
	delete(ns.w.files, id)
	ns.w.note("remove %s", path)
	return nil
}

func (ns *fakeNS) Rename(ctx context.Context, oldPath, newPath string) error {
	if err := ns.lock(); err != nil {
		return err
	}
	defer ns.w.mu.Unlock()
	moved := map[string]namespace.FileID{}
	for p, id := range ns.w.names {
		if p == oldPath {
			moved[newPath] = id
		} else if rest, ok := strings.CutPrefix(p, oldPath+"/"); ok {
			moved[newPath+"/"+rest] = id
		}
	}
	if len(moved) == 0 {
		return namespace.ErrNotFound
	}
	for p := range ns.w.names {
		if p == oldPath || strings.HasPrefix(p, oldPath+"/") {
			delete(ns.w.names, p)
		}
	}
	for p, id := range moved {
		if old, ok := ns.w.names[p]; ok {
			delete(ns.w.files, old) // replaced
		}
		ns.w.names[p] = id
	}
	ns.w.note("rename %s %s", oldPath, newPath)
	return nil
}

// AcquireWriter takes the lock in the world; it returns no *Writer, so the
// node never releases it (tests give it to another node with set).
func (ns *fakeNS) AcquireWriter(ctx context.Context, id namespace.FileID) (*namespace.Writer, error) {
	if err := ns.lock(); err != nil {
		return nil, err
	}
	defer ns.w.mu.Unlock()
	if err := ns.writerBusyLocked(id); err != nil {
		return nil, err
	}
	ns.w.writers[id] = ns.self
	ns.w.note("writer %s", id)
	return nil, nil
}

func (ns *fakeNS) AddHolding(id namespace.FileID, ver namespace.Version, chunks ...namespace.ChunkIdx) {
	ns.w.mu.Lock()
	defer ns.w.mu.Unlock()
	ns.w.holdLocked(ns.self, id, ver, namespace.NewChunks(chunks...))
}

func (ns *fakeNS) RemoveHolding(id namespace.FileID, ver namespace.Version, chunks ...namespace.ChunkIdx) {
	ns.w.mu.Lock()
	defer ns.w.mu.Unlock()
	fv := namespace.FileVersion{File: id, Ver: ver}
	c := ns.w.holdings[ns.self][fv].Clone()
	c.Remove(chunks...)
	ns.w.holdings[ns.self][fv] = c
}

func (ns *fakeNS) DropHolding(ctx context.Context, id namespace.FileID, ver namespace.Version) error {
	if err := ns.lock(); err != nil {
		return err
	}
	defer ns.w.mu.Unlock()
	if ns.w.dropFails {
		return fmt.Errorf("%w: fake holder drop", namespace.ErrUnavailable)
	}
	delete(ns.w.holdings[ns.self], namespace.FileVersion{File: id, Ver: ver})
	ns.w.note("drop holding %s v%d", id, ver)
	return nil
}

func (ns *fakeNS) Held() map[namespace.FileVersion]namespace.Chunks {
	ns.w.mu.Lock()
	defer ns.w.mu.Unlock()
	out := map[namespace.FileVersion]namespace.Chunks{}
	for fv, c := range ns.w.holdings[ns.self] {
		if c.Len() > 0 {
			out[fv] = c.Clone()
		}
	}
	return out
}

func (ns *fakeNS) Holders(ctx context.Context, id namespace.FileID, ver namespace.Version, chunk namespace.ChunkIdx) ([]namespace.NodeInfo, error) {
	if err := ns.lock(); err != nil {
		return nil, err
	}
	defer ns.w.mu.Unlock()
	var out []namespace.NodeInfo
	for node, hs := range ns.w.holdings {
		if hs[namespace.FileVersion{File: id, Ver: ver}].Has(chunk) {
			out = append(out, namespace.NodeInfo{ID: node, Peer: ns.w.nodes[node]})
		}
	}
	return out, nil
}

func (ns *fakeNS) WatchFiles(ctx context.Context, fn func(namespace.FileEvent)) error { return nil }
func (ns *fakeNS) WatchNames(ctx context.Context, fn func(namespace.NameEvent)) error { return nil }

// fakeS3 is the world's object store (objStore).
type fakeS3 struct{ w *world }

func (s fakeS3) FSID() objstore.FSID   { return testFSID }
func (s fakeS3) Stats() objstore.Stats { return objstore.Stats{} }

func (s fakeS3) PutChunk(ctx context.Context, ref objstore.ChunkRef, data []byte) (objstore.ChunkEntry, error) {
	s.w.mu.Lock()
	if gate := s.w.putGate; gate != nil {
		select {
		case <-s.w.putStarted:
		default:
			close(s.w.putStarted)
		}
		s.w.mu.Unlock()
		<-gate
		s.w.mu.Lock()
	}
	defer s.w.mu.Unlock()
	if s.w.s3Down {
		return objstore.ChunkEntry{}, objstore.ErrUnreachable
	}
	key := fmt.Sprintf("%s/%s/%d/%08d", testFSID, ref.File, ref.Ver, ref.Idx)
	s.w.objects[key] = append([]byte(nil), data...)
	s.w.note("put %s/%d/%d", ref.File, ref.Ver, ref.Idx)
	return objstore.ChunkEntry{Key: key, Size: int64(len(data)), CRC32C: objstore.Checksum(data)}, nil
}

func (s fakeS3) PutManifest(ctx context.Context, m *objstore.Manifest) (string, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.w.s3Down {
		return "", objstore.ErrUnreachable
	}
	key := manifestKey(m.ID, m.Version)
	s.w.manifests[key] = m
	s.w.note("put manifest %s/%d", m.ID, m.Version)
	return key, nil
}

// fakeCatalog resolves chunks from the world's manifests
// (manifestCatalog).
type fakeCatalog struct{ w *world }

func (c fakeCatalog) Add(m *objstore.Manifest) {}

func (c fakeCatalog) Manifest(ctx context.Context, id objstore.FileID, ver objstore.Version) (*objstore.Manifest, error) {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	m, ok := c.w.manifests[manifestKey(id, ver)]
	if !ok {
		return nil, objstore.ErrNotFound
	}
	return m, nil
}

func (c fakeCatalog) Chunk(ctx context.Context, ref objstore.ChunkRef) (peer.ChunkInfo, error) {
	m, err := c.Manifest(ctx, ref.File, ref.Ver)
	if err != nil {
		return peer.ChunkInfo{}, err
	}
	if int(ref.Idx) >= len(m.Chunks) {
		return peer.ChunkInfo{}, peer.ErrNoChunk
	}
	e := m.Chunks[ref.Idx]
	return peer.ChunkInfo{Key: e.Key, Size: e.Size, CRC32C: e.CRC32C, HaveCRC: true}, nil
}

// objectLocal is another node's pool (peer.Local): it holds every chunk
// the world's objects have.
type objectLocal struct{ w *world }

func (l objectLocal) ReadChunk(ref objstore.ChunkRef, off, n int64) ([]byte, int64, objstore.CRC32C, bool) {
	l.w.mu.Lock()
	if cb := l.w.onServe; cb != nil {
		l.w.mu.Unlock()
		cb(ref)
		l.w.mu.Lock()
	}
	defer l.w.mu.Unlock()
	b, ok := l.w.objects[fmt.Sprintf("%s/%s/%d/%08d", testFSID, ref.File, ref.Ver, ref.Idx)]
	if !ok {
		return nil, 0, 0, false
	}
	size := int64(len(b))
	off = min(max(off, 0), size)
	end := size
	if n >= 0 {
		end = min(off+n, size)
	}
	return b[off:end], size, objstore.Checksum(b), true
}

func (l objectLocal) StoreChunk(objstore.ChunkRef, []byte, objstore.CRC32C) error { return nil }

// fakeDir is a node's peer.Directory on its fakeNS.
type fakeDir struct{ ns *fakeNS }

func (d fakeDir) LiveNodes() []peer.Node {
	var out []peer.Node
	for _, nd := range d.ns.Nodes() {
		out = append(out, peer.Node{ID: peer.NodeID(nd.ID), URL: nd.Peer})
	}
	return out
}

func (d fakeDir) Holders(ctx context.Context, ref objstore.ChunkRef) ([]peer.Node, error) {
	hs, err := d.ns.Holders(ctx, namespace.FileID(ref.File), namespace.Version(ref.Ver), namespace.ChunkIdx(ref.Idx))
	var out []peer.Node
	for _, h := range hs {
		out = append(out, peer.Node{ID: peer.NodeID(h.ID), URL: h.Peer})
	}
	return out, err
}

func (d fakeDir) AddHolding(ctx context.Context, ref objstore.ChunkRef) error {
	d.ns.AddHolding(namespace.FileID(ref.File), namespace.Version(ref.Ver), namespace.ChunkIdx(ref.Idx))
	return nil
}

const testToken = "unit-test-token"

// serveObjects starts node's chunk server over the world's objects (a
// real peer.Peer over HTTP) and registers it as a live node.
func serveObjects(t *testing.T, w *world, node namespace.NodeID) {
	t.Helper()
	ns := &fakeNS{w: w, self: node}
	p, err := peer.New(peer.Config{Self: peer.NodeID(node), Token: testToken, Dir: fakeDir{ns}, Local: objectLocal{w}, Catalog: fakeCatalog{w}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	w.set(func(w *world) { w.nodes[node] = srv.URL })
}

// testPool opens a fresh pool (core on a memory medium); at cleanup it
// closes it and checks it (recovery.Check), as every test pool is.
func testPool(t *testing.T) *core.FS {
	t.Helper()
	p, _ := pooltest.MustOpen(t, pooltest.Options{Size: 64 << 20})
	return p
}

// testNode makes node self of w on a fresh pool, started as a daemon's,
// and closes it at cleanup (before the pool's check).
func testNode(t *testing.T, w *world, self namespace.NodeID) *Node {
	t.Helper()
	p := testPool(t)
	ns := &fakeNS{w: w, self: self}
	n := &Node{cfg: Config{Node: string(self)}, log: zap.NewNop(), ns: ns, store: fakeS3{w},
		files: map[core.Ino]*file{}, byID: map[namespace.FileID]*file{}, cache: newMemCache(1 << 20),
		aheadSlots: make(chan struct{}, maxReadAheadFetches), ev: newEvictor()}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.cat = &catalog{n: n, attach: peer.NewAttachCatalog(), manifests: fakeCatalog{w},
		own: map[objstore.FileID]bool{}, buckets: map[string]*objstore.Store{}}
	var err error
	if n.peer, err = peer.New(peer.Config{Self: peer.NodeID(self), Token: testToken, Dir: fakeDir{ns}, Local: local{n}, Catalog: n.cat}); err != nil {
		t.Fatal(err)
	}
	w.set(func(w *world) { w.nodes[self] = "http://127.0.0.1:1/" + string(self) }) // never asked: it is self
	if err := n.Start(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}
