package cluster

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// resetLocked makes f the placeholder of version rec: its old chunks are
// discarded (truncated away), its size and attributes are the record's.
// Precondition: f.mu is held (released while it waits for stores).
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
		n.dropHolding(f.id, old, f.in.Ino)
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
// Precondition: f.mu is held.
func (n *Node) applyMetaLocked(f *file, rec namespace.FileRecord, rev int64) {
	mt := rec.MtimeTime()
	mode := rec.Mode & format.ModePerm
	if err := n.p.Setattr(f.in, core.SetAttr{Mtime: &mt, Mode: &mode, UID: &rec.UID, GID: &rec.GID}); err != nil {
		n.log.Warn("taking another node's chmod/chown/utimes", zap.String("id", string(f.id)), zap.Error(err))
		return
	}
	n.rebaseLocked(f, rev, rec.Mtime)
}

// rebaseLocked makes rev (with its mtime) the base of f's next commit and
// saves it; a failed save is logged.
// Precondition: f.mu is held.
func (n *Node) rebaseLocked(f *file, rev, mtime int64) {
	f.base, f.mtime = rev, mtime
	if err := n.saveLocked(f); err != nil {
		n.log.Warn("saving the cluster state", zap.String("id", string(f.id)), zap.Error(err))
	}
}

// testHookMetaChecked, set only by tests, runs in MetaChanged between its
// look at the writers and its SetMeta.
var testHookMetaChecked func()

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
	// lockMu, held from the look at the writers to the new base: a
	// writer opening here meanwhile would read the revision before the
	// SetMeta and commit on it, and its commit would conflict (DESIGN
	// §Lock order). Now it opens before (and its commit carries the
	// change) or after (and starts from the new revision).
	f.lockMu.Lock()
	defer f.lockMu.Unlock()
	f.mu.Lock()
	if f.writers > 0 && f.ver > 0 && !f.removed {
		// The writer's commit carries them, even if it wrote nothing.
		f.dirty = true
	}
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
	if testHookMetaChecked != nil {
		testHookMetaChecked()
	}
	a := in.Attr()
	m := namespace.Meta{Mode: a.Mode & format.ModePerm, UID: a.UID, GID: a.GID, Mtime: a.Mtime.UnixNano()}
	for try := 0; ; try++ {
		rec, rev, err := n.ns.SetMeta(ctx, id, base, m)
		switch {
		case err == nil:
			f.mu.Lock()
			if f.ver == rec.Version && rev > f.base {
				n.rebaseLocked(f, rev, rec.Mtime)
			}
			f.mu.Unlock()
			return nil
		case errors.Is(err, namespace.ErrWriterHeld):
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
