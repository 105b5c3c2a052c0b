package peer

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dnnfs/dnnfs/cluster/ids"
	"github.com/dnnfs/dnnfs/cluster/objstore"
	"golang.org/x/sync/singleflight"
)

// NodeID is a node's name in the cluster (--node-id; ids.NodeID).
type NodeID = ids.NodeID

// ParseNodeID checks s is a NodeID (ids.ParseNodeID).
func ParseNodeID(s string) (NodeID, error) { return ids.ParseNodeID(s) }

// Node is a live member: its id and the base URL of its chunk server
// ("https://127.0.0.2:7600"), as its membership record says.
type Node struct {
	ID  NodeID
	URL string
}

// Directory is what the peer tier needs of the namespace (etcd in
// cluster/namespace): who is alive, who holds a chunk, and "this node now
// holds it". Implementations are safe for concurrent use.
type Directory interface {
	// LiveNodes returns the members with a live lease, this node included.
	LiveNodes() []Node
	// Holders returns the live nodes whose holders record lists ref.
	Holders(ctx context.Context, ref objstore.ChunkRef) ([]Node, error)
	// AddHolding adds ref to this node's holders record (batched and bound
	// to the node's lease by the implementation).
	AddHolding(ctx context.Context, ref objstore.ChunkRef) error
}

// Local is this node's pool, as far as the peer tier needs it.
// Implementations are safe for concurrent use.
type Local interface {
	// ReadChunk returns n bytes from off of a chunk this node holds (n < 0:
	// to its end; n == 0: none, only the size and CRC; a range past the end
	// is cut at the end), the whole chunk's size and CRC-32C; ok is false
	// when it is not held. The caller does not modify data, which must stay
	// as it is until the caller is done with it (a reply is being written).
	ReadChunk(ref objstore.ChunkRef, off, n int64) (data []byte, size int64, crc objstore.CRC32C, ok bool)
	// StoreChunk keeps a whole, verified chunk so that this node serves it.
	// data is shared with Fetch's callers: copy it, or keep it unmodified.
	StoreChunk(ref objstore.ChunkRef, data []byte, crc objstore.CRC32C) error
}

// ChunkInfo is where a chunk lives in S3 and what it must check to.
type ChunkInfo struct {
	Key  string // the object holding it
	Off  int64  // its first byte in that object (0 but for attached objects)
	Size int64
	// CRC32C is the manifest's checksum; HaveCRC is false for attached
	// foreign objects, which have no manifest (their chunks are checked
	// against the CRC-32C a peer sends, and S3's own transfer).
	CRC32C  objstore.CRC32C
	HaveCRC bool
	// Store holds Key; nil means Config.Store (an attached prefix may be
	// in another bucket).
	Store *objstore.Store
}

// Catalog resolves a chunk to its object and checksum.
type Catalog interface {
	Chunk(ctx context.Context, ref objstore.ChunkRef) (ChunkInfo, error)
}

// Source says where Fetch found a chunk.
type Source int

const (
	SourceLocal Source = iota // this node's pool
	SourcePeer                // a node holding it
	SourceHome                // its home node (which may have filled it from S3)
	SourceS3                  // the object store, by this node
	numSources
)

func (s Source) String() string {
	switch s {
	case SourceLocal:
		return "local"
	case SourcePeer:
		return "peer"
	case SourceHome:
		return "home"
	case SourceS3:
		return "s3"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// Config configures one node's peer tier.
type Config struct {
	Self  NodeID
	Token string // the cluster token (--cluster-token-file), non-empty
	Dir   Directory
	Local Local
	// Catalog resolves chunks; nil means a ManifestCatalog over Store.
	Catalog Catalog
	// Store is the S3 tier, for fills; nil means none (peers only).
	Store *objstore.Store
	// Client sends requests to peers; nil means NewClient(nil) (plain
	// HTTP). Give NewClient(ClientTLS(...)) for TLS.
	Client *http.Client
	// PeerTimeout bounds one request to a peer, a home node's fill from S3
	// included; 0 means 30 s. A peer that hangs costs this once.
	PeerTimeout time.Duration
	// SuspectFor is how long a peer that failed a request (no connection,
	// cut reply, 401, bad checksum; not a 404 or 502) is passed over; 0 means
	// 5 s, about a node lease, after which a dead node has left the
	// membership anyway.
	SuspectFor time.Duration
}

// Peer is one node's peer tier: the chunk server (ServeHTTP) and the
// fetcher (Fetch). It is safe for concurrent use.
type Peer struct {
	cfg     Config
	token   [sha256.Size]byte
	catalog Catalog
	client  *http.Client
	timeout time.Duration
	flights singleflight.Group // "fetch <ref>" and "fill <ref>": one of each per chunk

	suspectFor time.Duration
	mu         sync.Mutex
	suspect    map[NodeID]time.Time // failed peers, passed over until then

	src          [numSources]sourceCounters
	badCRC       atomic.Int64
	unauthorized atomic.Int64
	storeErrors  atomic.Int64
	holdErrors   atomic.Int64
	skipped      atomic.Int64

	served       atomic.Int64
	servedBytes  atomic.Int64
	servedDenied atomic.Int64
	servedMiss   atomic.Int64
	fills        atomic.Int64
}

type sourceCounters struct {
	requests, hits, bytes atomic.Int64
}

// SourceStats counts one source.
type SourceStats struct {
	Requests int64 `json:"requests"` // attempts (a local lookup, a request to a peer, an S3 fill)
	Hits     int64 `json:"hits"`     // chunks obtained from it
	Bytes    int64 `json:"bytes"`    // their bytes
}

// Stats are a Peer's counters since New.
type Stats struct {
	Local SourceStats `json:"local"`
	Peer  SourceStats `json:"peer"`
	Home  SourceStats `json:"home"`
	S3    SourceStats `json:"s3"`

	BadCRC        int64 `json:"bad_crc"`        // chunks refused for a size or checksum mismatch
	Unauthorized  int64 `json:"unauthorized"`   // peers that answered 401 to this node
	StoreErrors   int64 `json:"store_errors"`   // fetched chunks Local.StoreChunk refused (served anyway)
	HoldingErrors int64 `json:"holding_errors"` // Directory.AddHolding failures (the chunk is served, not announced)
	Skipped       int64 `json:"skipped"`        // peers passed over as suspect (they failed a request lately)

	Served        int64 `json:"served"` // chunk requests this node's server answered with bytes
	ServedBytes   int64 `json:"served_bytes"`
	ServedDenied  int64 `json:"served_denied"`  // requests refused for the token (401)
	ServedMissing int64 `json:"served_missing"` // 404s for chunks not held
	Fills         int64 `json:"fills"`          // ?fill=1 requests for chunks not held (one S3 GET per flight)
}

// ReadTokenFile reads the cluster token from --cluster-token-file: the
// file's content without surrounding white space (a trailing newline);
// an empty one is ErrNoToken.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cluster token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("cluster token file %s: %w", path, ErrNoToken)
	}
	return tok, nil
}

// New makes a node's peer tier.
func New(cfg Config) (*Peer, error) {
	if cfg.Token == "" {
		return nil, ErrNoToken
	}
	if _, err := ParseNodeID(string(cfg.Self)); err != nil {
		return nil, err
	}
	if cfg.Dir == nil || cfg.Local == nil {
		return nil, errors.New("peer: Config needs Dir and Local")
	}
	p := &Peer{cfg: cfg, token: sha256.Sum256([]byte(cfg.Token)), catalog: cfg.Catalog, client: cfg.Client,
		timeout: cfg.PeerTimeout, suspectFor: cfg.SuspectFor, suspect: map[NodeID]time.Time{}}
	if p.catalog == nil {
		if cfg.Store == nil {
			return nil, errors.New("peer: Config needs a Catalog or a Store")
		}
		p.catalog = NewManifestCatalog(cfg.Store)
	}
	if p.client == nil {
		p.client = NewClient(nil)
	}
	if p.timeout <= 0 {
		p.timeout = 30 * time.Second
	}
	if p.suspectFor <= 0 {
		p.suspectFor = 5 * time.Second
	}
	return p, nil
}

// Self returns this node's id.
func (p *Peer) Self() NodeID { return p.cfg.Self }

// tokenOK compares a presented token with the cluster's in constant time
// (of their hashes, so the length does not show either).
func (p *Peer) tokenOK(tok string) bool {
	h := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(h[:], p.token[:]) == 1
}

// Stats returns the counters.
func (p *Peer) Stats() Stats {
	get := func(s Source) SourceStats {
		c := &p.src[s]
		return SourceStats{Requests: c.requests.Load(), Hits: c.hits.Load(), Bytes: c.bytes.Load()}
	}
	return Stats{
		Local: get(SourceLocal), Peer: get(SourcePeer), Home: get(SourceHome), S3: get(SourceS3),
		BadCRC: p.badCRC.Load(), Unauthorized: p.unauthorized.Load(),
		StoreErrors: p.storeErrors.Load(), HoldingErrors: p.holdErrors.Load(), Skipped: p.skipped.Load(),
		Served: p.served.Load(), ServedBytes: p.servedBytes.Load(), ServedDenied: p.servedDenied.Load(),
		ServedMissing: p.servedMiss.Load(), Fills: p.fills.Load(),
	}
}
