package cluster

import (
	"context"
	"fmt"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/core"
)

// WarmInfo describes the version of a cluster file warm-up brings.
type WarmInfo struct {
	Version   uint64 `json:"version"`
	Size      int64  `json:"size"`
	ChunkSize int64  `json:"chunk_size"`
	Chunks    int64  `json:"chunks"`
}

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
