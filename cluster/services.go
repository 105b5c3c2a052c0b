package cluster

import (
	"context"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/cluster/peer"
)

// nsClient is what the glue needs of the namespace: *namespace.NS (etcd)
// in a daemon, an in-memory fake in the package's unit tests, so that the
// file logic is tested without etcd (DESIGN §Cluster). The methods are
// namespace.NS's, with their errors.
type nsClient interface {
	FSID() namespace.FSID
	ChunkSize() int64
	Lease() int64
	Nodes() []namespace.NodeInfo
	Close() error

	Stat(ctx context.Context, path string) (namespace.FileID, namespace.FileRecord, int64, error)
	Lookup(ctx context.Context, path string) (namespace.FileID, error)
	List(ctx context.Context, dir string) ([]namespace.Entry, error)
	File(ctx context.Context, id namespace.FileID) (namespace.FileRecord, int64, error)
	Commit(ctx context.Context, path string, id namespace.FileID, base int64, rec namespace.FileRecord, held namespace.Chunks) (int64, error)
	SetMeta(ctx context.Context, id namespace.FileID, base int64, m namespace.Meta) (namespace.FileRecord, int64, error)
	Remove(ctx context.Context, path string) error
	Rename(ctx context.Context, oldPath, newPath string) error
	// AcquireWriter may return a nil *Writer with no error (a fake's lock
	// needs no release).
	AcquireWriter(ctx context.Context, id namespace.FileID) (*namespace.Writer, error)

	AddHolding(id namespace.FileID, ver namespace.Version, chunks ...namespace.ChunkIdx)
	RemoveHolding(id namespace.FileID, ver namespace.Version, chunks ...namespace.ChunkIdx)
	DropHolding(ctx context.Context, id namespace.FileID, ver namespace.Version) error
	Held() map[namespace.FileVersion]namespace.Chunks
	Holders(ctx context.Context, id namespace.FileID, ver namespace.Version, chunk namespace.ChunkIdx) ([]namespace.NodeInfo, error)

	WatchFiles(ctx context.Context, fn func(namespace.FileEvent)) error
	WatchNames(ctx context.Context, fn func(namespace.NameEvent)) error
}

// objStore is what commits need of S3: *objstore.Store, or the unit
// tests' in-memory fake.
type objStore interface {
	FSID() objstore.FSID
	PutChunk(ctx context.Context, ref objstore.ChunkRef, data []byte) (objstore.ChunkEntry, error)
	PutManifest(ctx context.Context, m *objstore.Manifest) (string, error)
	Stats() objstore.Stats
}

// manifestCatalog is the catalog of committed versions' manifests:
// *peer.ManifestCatalog over S3, or the unit tests' fake.
type manifestCatalog interface {
	peer.Catalog
	Manifest(ctx context.Context, id objstore.FileID, ver objstore.Version) (*objstore.Manifest, error)
	Add(m *objstore.Manifest)
}

var (
	_ nsClient        = (*namespace.NS)(nil)
	_ objStore        = (*objstore.Store)(nil)
	_ manifestCatalog = (*peer.ManifestCatalog)(nil)
)
