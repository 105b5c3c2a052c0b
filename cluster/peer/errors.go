package peer

import (
	"errors"

	"github.com/dnnfs/dnnfs/cluster/ids"
)

// The sentinel errors, each with when it is returned.
var (
	// ErrBadNodeID is returned by ParseNodeID and New for a node id
	// outside [a-z0-9._-]{1,64}; it is ids.ErrInvalid.
	ErrBadNodeID = ids.ErrInvalid
	// ErrNoToken is returned by New without a cluster token, and by
	// ReadTokenFile for a token file with none in it.
	ErrNoToken = errors.New("peer: no cluster token")
	// ErrNoSource is returned by Fetch when no source could give the
	// chunk: S3, the last one, failed too (its error is wrapped with it).
	ErrNoSource = errors.New("peer: chunk unavailable from every source")
	// ErrBadChunk is returned for a chunk whose size or CRC-32C does not
	// match its manifest (or, from a peer, its own X-Dnnfs-Crc32c).
	ErrBadChunk = errors.New("peer: chunk size or crc32c mismatch")
	// ErrNoStore is returned by a fill from S3 on a node configured
	// without a Store.
	ErrNoStore = errors.New("peer: no S3 store configured")
	// ErrNoChunk is returned by a catalog for a chunk index past the end
	// of its version's manifest.
	ErrNoChunk = errors.New("peer: no such chunk in the manifest")
	// ErrNotInCatalog is returned by a catalog that does not know the file
	// (Chain then asks the next one).
	ErrNotInCatalog = errors.New("peer: file not in this catalog")
	// ErrBadChunkPath is returned by ParseChunkPath for a chunk path that
	// is not "<id>/<ver>/<chunk>" in canonical form.
	ErrBadChunkPath = errors.New("peer: want /v1/chunks/<32 hex id>/<version>/<chunk>")
	// ErrBadRange is returned for a Range header that is not one
	// "bytes=a-b", "bytes=a-" or "bytes=-n".
	ErrBadRange = errors.New("peer: want one range: bytes=a-b, bytes=a- or bytes=-n")
)
