package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dnnfs/dnnfs/cluster/objstore"
	"golang.org/x/sync/singleflight"
)

// manifestRetryAfter is how long a manifest that S3 could not be reached
// for is not asked again: with S3 down, every chunk of the file would
// otherwise wait for the client's retries before its peers are asked.
const manifestRetryAfter = 2 * time.Second

// manifestCacheMax bounds the manifests a ManifestCatalog keeps (a few KiB
// each); past it an arbitrary one is dropped and read again when needed.
const manifestCacheMax = 4096

type fileVer struct {
	id  objstore.FileID
	ver objstore.Version
}

// ManifestCatalog is the Catalog of committed versions: it reads a
// version's manifest from S3 once (one flight for concurrent askers),
// keeps it (a manifest is immutable) and answers every chunk of it.
type ManifestCatalog struct {
	store   *objstore.Store
	flights singleflight.Group
	mu      sync.Mutex
	cache   map[fileVer]*objstore.Manifest
	failed  map[fileVer]failure // ErrUnreachable, until a time
}

type failure struct {
	err   error
	until time.Time
}

// NewManifestCatalog makes a ManifestCatalog over store, whose FSID names
// the manifests' keys.
func NewManifestCatalog(store *objstore.Store) *ManifestCatalog {
	return &ManifestCatalog{store: store, cache: map[fileVer]*objstore.Manifest{}, failed: map[fileVer]failure{}}
}

// Add keeps a manifest this node already has (it just committed it), so
// its chunks resolve without a GET.
func (c *ManifestCatalog) Add(m *objstore.Manifest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addLocked(m)
}

func (c *ManifestCatalog) addLocked(m *objstore.Manifest) {
	if len(c.cache) >= manifestCacheMax {
		for k := range c.cache {
			delete(c.cache, k)
			break
		}
	}
	c.cache[fileVer{m.ID, m.Version}] = m
}

// Manifest returns the manifest of (id, ver), from the cache or S3.
func (c *ManifestCatalog) Manifest(ctx context.Context, id objstore.FileID, ver objstore.Version) (*objstore.Manifest, error) {
	k := fileVer{id, ver}
	c.mu.Lock()
	m, f := c.cache[k], c.failed[k]
	c.mu.Unlock()
	if m != nil {
		return m, nil
	}
	if f.err != nil && time.Now().Before(f.until) {
		return nil, f.err
	}
	v, err, _ := c.flights.Do(fmt.Sprintf("%s/%d", id, ver), func() (any, error) {
		key := c.store.ManifestKey(id, ver)
		m, err := c.store.GetManifest(ctx, key)
		if err != nil {
			if errors.Is(err, objstore.ErrUnreachable) {
				c.mu.Lock()
				if len(c.failed) >= manifestCacheMax {
					clear(c.failed)
				}
				c.failed[k] = failure{err, time.Now().Add(manifestRetryAfter)}
				c.mu.Unlock()
			}
			return nil, err
		}
		if m.ID != id || m.Version != ver {
			return nil, fmt.Errorf("%s: %w: it is of %s version %d", key, objstore.ErrBadManifest, m.ID, m.Version)
		}
		c.Add(m)
		return m, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*objstore.Manifest), nil
}

// Chunk resolves a chunk through its version's manifest.
func (c *ManifestCatalog) Chunk(ctx context.Context, ref objstore.ChunkRef) (ChunkInfo, error) {
	m, err := c.Manifest(ctx, ref.File, ref.Ver)
	if err != nil {
		return ChunkInfo{}, err
	}
	if int64(ref.Idx) >= int64(len(m.Chunks)) {
		return ChunkInfo{}, fmt.Errorf("%w: %s (the manifest has %d)", ErrNoChunk, ref, len(m.Chunks))
	}
	e := m.Chunks[ref.Idx]
	return ChunkInfo{Key: e.Key, Size: e.Size, CRC32C: e.CRC32C, HaveCRC: true}, nil
}

// Chain is a Catalog asking each of its catalogs in turn until one knows
// the file: an AttachCatalog (in memory) before a ManifestCatalog (which
// asks S3 for anything).
type Chain []Catalog

// Chunk asks the catalogs in order.
func (c Chain) Chunk(ctx context.Context, ref objstore.ChunkRef) (ChunkInfo, error) {
	for _, cat := range c {
		info, err := cat.Chunk(ctx, ref)
		if !errors.Is(err, ErrNotInCatalog) {
			return info, err
		}
	}
	return ChunkInfo{}, fmt.Errorf("%w: %s", ErrNotInCatalog, ref.File)
}

// AttachCatalog is the Catalog of attached foreign objects (dnnfs
// attach): each object is one file of version 1 whose chunks are byte
// ranges of it, read with ranged GETs. There is no manifest, so no
// CRC-32C to check against but the one a peer sends; the FileID binds the
// etag (objstore.ForeignFileID), so a rewritten object is another file.
type AttachCatalog struct {
	mu   sync.Mutex
	objs map[objstore.FileID]attached
}

type attached struct {
	store     *objstore.Store
	obj       objstore.ObjectInfo
	chunkSize int64
}

// NewAttachCatalog makes an empty AttachCatalog.
func NewAttachCatalog() *AttachCatalog {
	return &AttachCatalog{objs: map[objstore.FileID]attached{}}
}

// Add attaches an object of store (as ListForeign or Stat found it) cut
// into chunkSize chunks, and returns its FileID.
func (c *AttachCatalog) Add(store *objstore.Store, o objstore.ObjectInfo, chunkSize int64) objstore.FileID {
	id := objstore.ForeignFileID(store.Bucket(), o.Key, o.ETag)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.objs[id] = attached{store, o, chunkSize}
	return id
}

// Chunk resolves a chunk of an attached object.
func (c *AttachCatalog) Chunk(_ context.Context, ref objstore.ChunkRef) (ChunkInfo, error) {
	c.mu.Lock()
	a, ok := c.objs[ref.File]
	c.mu.Unlock()
	if !ok {
		return ChunkInfo{}, fmt.Errorf("%w: %s", ErrNotInCatalog, ref.File)
	}
	off := int64(ref.Idx) * a.chunkSize
	if ref.Ver != 1 || off >= a.obj.Size {
		return ChunkInfo{}, fmt.Errorf("%w: %s of %s (%d bytes)", ErrNoChunk, ref, a.obj.Key, a.obj.Size)
	}
	return ChunkInfo{Key: a.obj.Key, Off: off, Size: min(a.chunkSize, a.obj.Size-off), Store: a.store}, nil
}
