package peer_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/cluster/peer"
	"github.com/dnnfs/dnnfs/tests/clusterenv"
)

// The seams: a fixed membership standing in for the namespace's etcd
// records (live nodes, holders) and a pool in memory. The servers, the
// HTTP between them and S3 (versitygw) are real.

// fixedDir is the membership every test node shares: who is in it, and
// who holds which chunk.
type fixedDir struct {
	mu      sync.Mutex
	nodes   []peer.Node
	holders map[objstore.ChunkRef]map[peer.NodeID]bool
}

func (d *fixedDir) view(self peer.NodeID) peer.Directory { return dirView{d, self} }

func (d *fixedDir) add(n peer.Node) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nodes = append(d.nodes, n)
}

// holdersOf lists the nodes holding ref, sorted.
func (d *fixedDir) holdersOf(ref objstore.ChunkRef) []peer.NodeID {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []peer.NodeID
	for id := range d.holders[ref] {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

type dirView struct {
	d    *fixedDir
	self peer.NodeID
}

func (v dirView) LiveNodes() []peer.Node {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	return append([]peer.Node(nil), v.d.nodes...)
}

func (v dirView) Holders(_ context.Context, ref objstore.ChunkRef) ([]peer.Node, error) {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	var out []peer.Node
	for _, n := range v.d.nodes {
		if v.d.holders[ref][n.ID] {
			out = append(out, n)
		}
	}
	return out, nil
}

func (v dirView) AddHolding(_ context.Context, ref objstore.ChunkRef) error {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	if v.d.holders == nil {
		v.d.holders = map[objstore.ChunkRef]map[peer.NodeID]bool{}
	}
	if v.d.holders[ref] == nil {
		v.d.holders[ref] = map[peer.NodeID]bool{}
	}
	v.d.holders[ref][v.self] = true
	return nil
}

// memLocal is a pool in memory.
type memLocal struct {
	mu     sync.Mutex
	chunks map[objstore.ChunkRef]memChunk
}

type memChunk struct {
	data []byte
	crc  objstore.CRC32C
}

func newMemLocal() *memLocal { return &memLocal{chunks: map[objstore.ChunkRef]memChunk{}} }

func (m *memLocal) ReadChunk(ref objstore.ChunkRef, off, n int64) ([]byte, int64, objstore.CRC32C, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.chunks[ref]
	if !ok {
		return nil, 0, 0, false
	}
	size := int64(len(c.data))
	off = min(off, size)
	end := size
	if n >= 0 {
		end = min(off+n, size)
	}
	return append([]byte(nil), c.data[off:end]...), size, c.crc, true
}

func (m *memLocal) StoreChunk(ref objstore.ChunkRef, data []byte, crc objstore.CRC32C) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.chunks[ref] = memChunk{append([]byte(nil), data...), crc}
	return nil
}

// drop empties the pool.
func (m *memLocal) drop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.chunks)
}

func (m *memLocal) has(ref objstore.ChunkRef) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.chunks[ref]
	return ok
}

// corrupt flips a byte of a held chunk; keepCRC says whether the CRC it
// reports stays the true one (a bit flip in memory) or is recomputed (a
// peer that lies consistently).
func (m *memLocal) corrupt(ref objstore.ChunkRef, keepCRC bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.chunks[ref]
	c.data = append([]byte(nil), c.data...)
	c.data[len(c.data)/2] ^= 0x40
	if !keepCRC {
		c.crc = objstore.Checksum(c.data)
	}
	m.chunks[ref] = c
}

const (
	fsid  = objstore.FSID("0123456789abcdef0123456789abcdef")
	token = "cluster-token-for-tests"
)

// env is a cluster of in-process nodes over one real S3 server.
type env struct {
	t   testing.TB
	s3  *clusterenv.S3
	dir *fixedDir
}

func newEnv(t testing.TB) *env {
	return &env{t: t, s3: clusterenv.StartS3(t), dir: &fixedDir{}}
}

// node is one member: its pool, its S3 client (own counters), its peer
// tier and its chunk server on a real 127.0.0.1 listener.
type node struct {
	id    peer.NodeID
	local *memLocal
	store *objstore.Store
	peer  *peer.Peer
	srv   *peer.Server
}

type nodeOpts struct {
	token     string
	handler   func(http.Handler) http.Handler // wraps the server, e.g. to die mid-reply
	serverTLS *tls.Config
	client    *http.Client
	catalog   func(*objstore.Store) peer.Catalog // nil: the default, a ManifestCatalog
}

func (e *env) openStore() *objstore.Store {
	st, err := objstore.Open(context.Background(), objstore.Config{
		Endpoint: e.s3.Endpoint, Bucket: e.s3.Bucket, AccessKey: e.s3.AccessKey, SecretKey: e.s3.SecretKey, FSID: fsid,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *env) addNode(id string, o nodeOpts) *node {
	e.t.Helper()
	if o.token == "" {
		o.token = token
	}
	n := &node{id: peer.NodeID(id), local: newMemLocal(), store: e.openStore()}
	var cat peer.Catalog
	if o.catalog != nil {
		cat = o.catalog(n.store)
	}
	p, err := peer.New(peer.Config{
		Self:       n.id,
		Token:      o.token,
		Dir:        e.dir.view(n.id),
		Local:      n.local,
		Catalog:    cat,
		Store:      n.store,
		Client:     o.client,
		SuspectFor: time.Hour, // a failed peer stays passed over for the whole test
	})
	if err != nil {
		e.t.Fatal(err)
	}
	n.peer = p
	var h http.Handler = p
	if o.handler != nil {
		h = o.handler(p)
	}
	if n.srv, err = peer.Listen("127.0.0.1:0", h, o.serverTLS, nil); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { n.srv.Close() })
	e.dir.add(peer.Node{ID: n.id, URL: n.srv.URL})
	return n
}

// file is a committed version: its bytes and manifest.
type file struct {
	id   objstore.FileID
	data []byte
	m    *objstore.Manifest
}

func (f *file) ref(i int) objstore.ChunkRef {
	return objstore.ChunkRef{File: f.id, Ver: f.m.Version, Idx: objstore.ChunkIdx(i)}
}

func (f *file) chunk(i int) []byte {
	cs := int(f.m.ChunkSize)
	return f.data[i*cs : min((i+1)*cs, len(f.data))]
}

const chunkSize = 64 << 10

// commit writes a file of n chunks (the last one shorter) as a writer's
// commit does: chunks, then the manifest.
func (e *env) commit(seed int64, n int) *file {
	e.t.Helper()
	return e.commitSized(seed, n, chunkSize, n*chunkSize-1000)
}

func (e *env) commitSized(seed int64, n, chunkSize, size int) *file {
	e.t.Helper()
	st := e.openStore()
	r := rand.New(rand.NewSource(seed))
	f := &file{id: objstore.FileID(fmt.Sprintf("%032x", r.Uint64()))}
	f.data = make([]byte, size)
	r.Read(f.data)
	f.m = &objstore.Manifest{FSID: fsid, ID: f.id, Version: 1, Size: int64(len(f.data)), ChunkSize: int64(chunkSize)}
	for i := 0; i < n; i++ {
		ent, err := st.PutChunk(context.Background(), f.ref(i), f.chunk(i))
		if err != nil {
			e.t.Fatal(err)
		}
		f.m.Chunks = append(f.m.Chunks, ent)
	}
	if _, err := st.PutManifest(context.Background(), f.m); err != nil {
		e.t.Fatal(err)
	}
	return f
}

func chunkGets(nodes ...*node) int64 {
	var n int64
	for _, nd := range nodes {
		n += nd.store.Stats().ChunkGets
	}
	return n
}
