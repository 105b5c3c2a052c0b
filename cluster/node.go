package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/cluster/peer"
	"github.com/dnnfs/dnnfs/core"
)

// DefaultChunkSize is --chunk-size: the chunk size of a cluster created by
// this node (an existing cluster's, fixed in its fsid record, wins).
const DefaultChunkSize = 32 << 20

// DefaultCacheBytes bounds the memory cache of chunks this node filled for
// others as their home node without having a name for their file.
const DefaultCacheBytes = 1 << 30

// s3OpenTimeout bounds Dial's check of the S3 endpoint, bucket and
// credentials (etcd's is namespace.DefaultDialTimeout).
const s3OpenTimeout = 15 * time.Second

// Config is one daemon's cluster configuration (the mount flags).
type Config struct {
	Etcd       []string    // --etcd
	EtcdPrefix string      // --etcd-prefix
	EtcdTLS    *tls.Config // from --etcd-cert/--etcd-key/--etcd-cacert; nil: none

	S3Endpoint, S3Bucket, S3Region string

	Node       string      // --node-id
	PeerListen string      // --peer-listen
	PeerURL    string      // --peer-url; "" means from PeerListen
	Token      string      // the content of --cluster-token-file
	ServerTLS  *tls.Config // the chunk server's (--peer-cert/--peer-key, --peer-cacert for clients); nil: plain HTTP
	ClientTLS  *tls.Config // to reach peers; nil: plain HTTP
	ChunkSize  int64       // --chunk-size
	CacheBytes int64       // DefaultCacheBytes when 0
	// CacheMinFree is --cluster-cache-min-free in bytes: the pool's low
	// watermark, below which chunks are evicted; when 0, CacheMinFreePct
	// of the pool (DefaultCacheMinFreePct when 0).
	CacheMinFree    int64
	CacheMinFreePct float64
	// LeaseTTL of the node lease; namespace's default when 0.
	LeaseTTL time.Duration
	Log      *zap.Logger
}

// Notifier invalidates the kernel's caches (go-fuse's server: node ids are
// inode numbers).
type Notifier interface {
	InodeNotify(ino uint64, off, length int64)
	EntryNotify(parent uint64, name string)
}

// Node is this daemon's membership of the cluster. A nil *Node is the
// cluster switched off: every method then does nothing.
type Node struct {
	cfg   Config
	log   *zap.Logger
	ns    nsClient
	store objStore
	cat   *catalog
	peer  *peer.Peer
	srv   *peer.Server

	ctx    context.Context
	cancel context.CancelFunc

	// poolMu: p is set by Start and cleared by Close, which waits for
	// the users outside FUSE requests (usePool).
	poolMu    sync.RWMutex
	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex
	p      *core.FS // nil until Start and after Close
	files  map[core.Ino]*file
	byID   map[namespace.FileID]*file
	notify Notifier
	// serving is the peer tier once Dial built it (the chunk server
	// listens before: its URL is registered with the node).
	serving *peer.Peer
	// names serializes this node's changes of names in the pool made for
	// the cluster: placeholders, unlinks and renames (the namespace step
	// and the pool's), and the name watch's, so that the watch never acts
	// on a name this node is changing itself.
	names sync.Mutex

	cache *memCache
	// aheadSlots bounds the node's read-ahead fetches in flight
	// (maxReadAheadFetches), each a chunk in memory until stored.
	aheadSlots chan struct{}
	ev         *evictor   // the pool as a cache of chunks (evict.go)
	bg         bgCounters // failures of background work (background.go)
}

// Read-ahead (DESIGN §Cluster, "Reading"): a read starts fetching the
// readAheadChunks chunks after the ones it waits for, the node at most
// maxReadAheadFetches at once (4 × 32 MiB chunks per file, 256 MiB in all
// at the default chunk size).
const (
	readAheadChunks     = 4
	maxReadAheadFetches = 8
)

// Dial connects to etcd and S3, registers this node and starts its chunk
// server; the pool is not touched yet (Start). Every failure is one line.
func Dial(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	switch {
	case len(cfg.Etcd) == 0:
		return nil, fmt.Errorf("%w: no etcd endpoints", ErrConfig)
	case cfg.Node == "":
		return nil, fmt.Errorf("%w: --node-id is required with --etcd", ErrConfig)
	case cfg.S3Endpoint == "" || cfg.S3Bucket == "":
		return nil, fmt.Errorf("%w: --s3-endpoint and --s3-bucket are required with --etcd", ErrConfig)
	case cfg.PeerListen == "":
		return nil, fmt.Errorf("%w: --peer-listen is required with --etcd", ErrConfig)
	case cfg.Token == "":
		return nil, fmt.Errorf("%w: --cluster-token-file is required with --etcd", ErrConfig)
	}
	if _, err := peer.ParseNodeID(cfg.Node); err != nil {
		return nil, fmt.Errorf("--node-id %w", err)
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	if cfg.PeerURL == "" {
		host, _, err := net.SplitHostPort(cfg.PeerListen)
		if err != nil || host == "" || net.ParseIP(host).IsUnspecified() {
			return nil, fmt.Errorf("%w: --peer-listen %s: give a host to be reached at, or --peer-url", ErrConfig, cfg.PeerListen)
		}
	}
	n := &Node{cfg: cfg, log: cfg.Log, files: map[core.Ino]*file{}, byID: map[namespace.FileID]*file{},
		cache: newMemCache(cfg.CacheBytes), aheadSlots: make(chan struct{}, maxReadAheadFetches), ev: newEvictor()}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			n.Close()
		}
	}()
	// The chunk server listens first, so the URL registered in etcd
	// answers; until Start it holds nothing (ReadChunk: not held).
	srv, err := peer.Listen(cfg.PeerListen, peerHandler{n}, cfg.ServerTLS, log.New(zapWriter{n.log}, "", 0))
	if err != nil {
		return nil, fmt.Errorf("--peer-listen %s: %w", cfg.PeerListen, err)
	}
	n.srv = srv
	url := cfg.PeerURL
	if url == "" {
		url = srv.URL
	}
	ns, err := namespace.Open(ctx, namespace.Config{Endpoints: cfg.Etcd, Prefix: cfg.EtcdPrefix,
		Node: namespace.NodeID(cfg.Node), PeerURL: url, TLS: cfg.EtcdTLS, ChunkSize: cfg.ChunkSize,
		LeaseTTL: cfg.LeaseTTL, Logger: n.log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return quietClient{c} }))})
	if err != nil {
		return nil, oneLine(err)
	}
	n.ns = ns
	sctx, cancel := context.WithTimeout(ctx, s3OpenTimeout)
	defer cancel()
	store, err := objstore.Open(sctx, objstore.Config{Endpoint: cfg.S3Endpoint, Bucket: cfg.S3Bucket,
		Region: cfg.S3Region, FSID: objstore.FSID(ns.FSID())})
	if err != nil {
		return nil, oneLine(err)
	}
	n.store = store
	n.cat = &catalog{n: n, attach: peer.NewAttachCatalog(), manifests: peer.NewManifestCatalog(store),
		own: map[objstore.FileID]bool{}, buckets: map[string]*objstore.Store{}}
	pc := peer.Config{Self: peer.NodeID(cfg.Node), Token: cfg.Token, Dir: directory{n}, Local: local{n},
		Catalog: n.cat, Store: store}
	if cfg.ClientTLS != nil {
		pc.Client = peer.NewClient(cfg.ClientTLS)
	}
	if n.peer, err = peer.New(pc); err != nil {
		return nil, oneLine(err)
	}
	n.mu.Lock()
	n.serving = n.peer
	n.mu.Unlock()
	ok = true
	return n, nil
}

func oneLine(err error) error {
	return errors.New(strings.Join(strings.Fields(err.Error()), " "))
}

// peerHandler serves chunks once the peer tier exists (Dial builds it after
// the listener, whose URL it registers).
type peerHandler struct{ n *Node }

func (h peerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.n.mu.Lock()
	p := h.n.serving
	h.n.mu.Unlock()
	if p == nil {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	p.ServeHTTP(w, r)
}

// quietClient keeps the etcd client's own retries (warnings, a line per
// attempt) out of the log: the namespace reports what failed.
type quietClient struct{ zapcore.Core }

func (q quietClient) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if strings.HasSuffix(e.LoggerName, "etcd-client") && e.Level < zapcore.ErrorLevel {
		return ce
	}
	return q.Core.Check(e, ce)
}

func (q quietClient) With(f []zapcore.Field) zapcore.Core { return quietClient{q.Core.With(f)} }

// zapWriter hands the chunk server's own errors (failed handshakes) to the
// log.
type zapWriter struct{ l *zap.Logger }

func (z zapWriter) Write(b []byte) (int, error) {
	z.l.Warn("peer server", zap.String("error", strings.TrimSpace(string(b))))
	return len(b), nil
}

// Start attaches the pool: it loads the cluster state of the pool's files,
// drops the chunks of versions superseded while this node was away, and
// follows the namespace's changes.
func (n *Node) Start(p *core.FS) error {
	if n == nil {
		return nil
	}
	n.poolMu.Lock()
	n.p = p
	n.poolMu.Unlock()
	p.SetReclaimer(n.reclaim)
	st := p.Statfs()
	n.setMinFree(int64(st.Blocks) * int64(st.BlockSize))
	var known []*file
	for _, in := range p.Inodes() {
		if f := n.load(in); f != nil {
			known = append(known, f)
		}
	}
	for _, f := range known {
		f.mu.Lock()
		if f.ver > 0 && f.present.Len() > 0 {
			n.ns.AddHolding(f.id, f.ver, f.present.Slice()...)
		}
		f.mu.Unlock()
		n.revalidate(n.ctx, f)
	}
	if err := n.ns.WatchFiles(n.ctx, n.fileEvent); err != nil {
		return oneLine(err)
	}
	if err := n.ns.WatchNames(n.ctx, n.nameEvent); err != nil {
		return oneLine(err)
	}
	return nil
}

// SetNotifier gives the node the kernel's caches to invalidate.
func (n *Node) SetNotifier(nt Notifier) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.notify = nt
	n.mu.Unlock()
}

// Close leaves the cluster: the chunk server stops, the node's lease-bound
// records (membership, holders, writer locks) go.
func (n *Node) Close() error {
	if n == nil {
		return nil
	}
	n.closeOnce.Do(func() {
		n.cancel()
		if n.srv != nil {
			n.srv.Close()
		}
		if n.ns != nil {
			n.closeErr = n.ns.Close()
		}
		// Requests still being served and background work finish with
		// the pool before it closes.
		n.poolMu.Lock()
		if n.p != nil {
			n.p.SetReclaimer(nil)
		}
		n.p = nil
		n.poolMu.Unlock()
	})
	return n.closeErr
}

// usePool holds the pool open for a caller outside a FUSE request (the
// chunk server, watches, read-ahead); ok is false once Close began.
func (n *Node) usePool() (release func(), ok bool) {
	n.poolMu.RLock()
	if n.p == nil {
		n.poolMu.RUnlock()
		return nil, false
	}
	return n.poolMu.RUnlock, true
}

// Status is the "cluster" section of `dnnfs status --json`.
type Status struct {
	Node  string         `json:"node"`
	FSID  string         `json:"fsid"`
	Nodes []string       `json:"nodes"` // live nodes
	Fetch peer.Stats     `json:"fetch"` // per source: local, peer, home, s3
	S3    objstore.Stats `json:"s3"`    // the cluster's bucket and attached ones
	Held  []HeldJSON     `json:"held"`  // chunks this node holds
	// CachedChunks are chunks kept in memory for others (this node is
	// their home but has no name for their file).
	CachedChunks int   `json:"cached_chunks"`
	CachedBytes  int64 `json:"cached_bytes"`
	// Evicted counts the chunks evicted from the pool to keep its low
	// watermark free (DESIGN §Cluster).
	Evicted EvictStats `json:"evicted"`
	// Background counts failures of work no caller waits for.
	Background BackgroundStats `json:"background"`
}

// HeldJSON is one file version's chunks held by this node.
type HeldJSON struct {
	ID      string `json:"id"`
	Version uint64 `json:"version"`
	Chunks  string `json:"chunks"` // ranges, "0-3,7"
	Count   int    `json:"count"`  // how many
}

// Status returns the node's state and counters; nil when off.
func (n *Node) Status() *Status {
	if n == nil {
		return nil
	}
	s := &Status{Node: n.cfg.Node, FSID: string(n.ns.FSID()), Fetch: n.peer.Stats(), S3: n.store.Stats(), Held: []HeldJSON{}}
	n.cat.mu.Lock()
	for _, b := range n.cat.buckets { // attached buckets count too
		st := b.Stats()
		s.S3.ChunkGets += st.ChunkGets
		s.S3.ChunkGetBytes += st.ChunkGetBytes
		s.S3.ManifestGets += st.ManifestGets
		s.S3.Puts += st.Puts
		s.S3.PutBytes += st.PutBytes
		s.S3.Lists += st.Lists
		s.S3.Requests += st.Requests
	}
	n.cat.mu.Unlock()
	for _, nd := range n.ns.Nodes() {
		s.Nodes = append(s.Nodes, string(nd.ID))
	}
	sort.Strings(s.Nodes)
	for fv, c := range n.ns.Held() {
		s.Held = append(s.Held, HeldJSON{ID: string(fv.File), Version: uint64(fv.Ver), Chunks: c.String(), Count: c.Len()})
	}
	sort.Slice(s.Held, func(i, j int) bool {
		if s.Held[i].ID != s.Held[j].ID {
			return s.Held[i].ID < s.Held[j].ID
		}
		return s.Held[i].Version < s.Held[j].Version
	})
	s.CachedChunks, s.CachedBytes = n.cache.stats()
	s.Evicted = n.ev.stats()
	s.Background = n.bg.stats()
	return s
}

// ---------------------------------------------------------------------
// peer.Directory on the namespace

type directory struct{ n *Node }

func (d directory) LiveNodes() []peer.Node {
	var out []peer.Node
	for _, nd := range d.n.ns.Nodes() {
		out = append(out, peer.Node{ID: peer.NodeID(nd.ID), URL: nd.Peer})
	}
	return out
}

func (d directory) Holders(ctx context.Context, ref objstore.ChunkRef) ([]peer.Node, error) {
	hs, err := d.n.ns.Holders(ctx, namespace.FileID(ref.File), namespace.Version(ref.Ver), namespace.ChunkIdx(ref.Idx))
	if err != nil {
		return nil, err
	}
	out := make([]peer.Node, 0, len(hs))
	for _, h := range hs {
		out = append(out, peer.Node{ID: peer.NodeID(h.ID), URL: h.Peer})
	}
	return out, nil
}

func (d directory) AddHolding(ctx context.Context, ref objstore.ChunkRef) error {
	d.n.ns.AddHolding(namespace.FileID(ref.File), namespace.Version(ref.Ver), namespace.ChunkIdx(ref.Idx))
	return nil
}

// ---------------------------------------------------------------------
// memCache: chunks filled for others

type cached struct {
	data []byte
	crc  objstore.CRC32C
}

// memCache keeps chunks this node fetched as their home node for files it
// has no name for, oldest evicted first beyond its bound.
type memCache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	m     map[objstore.ChunkRef]cached
	order []objstore.ChunkRef
}

func newMemCache(max int64) *memCache {
	return &memCache{max: max, m: map[objstore.ChunkRef]cached{}}
}

// put keeps a chunk and returns the ones it evicted.
func (c *memCache) put(ref objstore.ChunkRef, data []byte, crc objstore.CRC32C) []objstore.ChunkRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[ref]; ok || int64(len(data)) > c.max {
		return nil
	}
	var gone []objstore.ChunkRef
	for c.bytes+int64(len(data)) > c.max && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		if e, ok := c.m[old]; ok {
			c.bytes -= int64(len(e.data))
			delete(c.m, old)
			gone = append(gone, old)
		}
	}
	c.m[ref] = cached{data: data, crc: crc}
	c.order = append(c.order, ref)
	c.bytes += int64(len(data))
	return gone
}

func (c *memCache) get(ref objstore.ChunkRef) (cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[ref]
	return e, ok
}

func (c *memCache) drop(ref objstore.ChunkRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[ref]; ok {
		c.bytes -= int64(len(e.data))
		delete(c.m, ref)
	}
}

func (c *memCache) stats() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.bytes
}
