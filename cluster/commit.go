package cluster

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
)

// commit makes the writer's changes the file's next version: changed
// chunks, then the manifest, then the one namespace transaction. Any
// failure is ErrCluster and nothing of it is visible.
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
// then the namespace transaction (publish); on success f is the new
// version.
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
	return n.publish(ctx, f, m, rec, base, crcs)
}

// publish is a commit's namespace transaction, then f's new state. It
// holds names, as unlink and rename do across their namespace step: the
// file is committed under the name it has now, not the one it had when the
// upload began, and a file unlinked here meanwhile is not committed at all
// (its objects are garbage no record names; DESIGN §Cluster, "Writing").
func (n *Node) publish(ctx context.Context, f *file, m *objstore.Manifest, rec namespace.FileRecord, base int64, crcs map[namespace.ChunkIdx]objstore.CRC32C) error {
	n.names.Lock()
	defer n.names.Unlock()
	path := n.pathOf(f.in)
	if path == "" {
		return nil // unlinked: nothing to name
	}
	held := namespace.ChunkRange(0, namespace.ChunkIdx(len(m.Chunks)))
	rev, err := n.ns.Commit(ctx, path, f.id, base, rec, held)
	if err != nil {
		return ioErr("commit "+path, err)
	}
	n.cat.manifests.Add(m)
	f.mu.Lock()
	f.ver, f.base, f.cs, f.mtime = rec.Version, rev, rec.ChunkSize, rec.Mtime
	f.present, f.crc = held, crcs
	if err := n.saveLocked(f); err != nil {
		n.log.Error("saving the cluster state after a commit", zap.String("path", path), zap.Error(err))
	}
	f.mu.Unlock()
	if old := rec.Version - 1; old > 0 {
		n.dropHolding(f.id, old, f.in.Ino)
	}
	return nil
}
