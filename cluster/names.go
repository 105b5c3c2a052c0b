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

// Lookup resolves a name the pool does not have from the namespace: a file
// committed elsewhere becomes a placeholder, a directory implied by names
// below it a local directory. core.ErrNotFound when the namespace has no
// such name either (or etcd does not answer).
func (n *Node) Lookup(ctx context.Context, dir *core.Inode, name string) (*core.Inode, error) {
	ctx = uninterrupted(ctx)
	if n == nil {
		return nil, core.ErrNotFound
	}
	path := join(n.pathOf(dir), name)
	if path == "" || namespace.CleanPath(path) != nil || n.away() {
		return nil, core.ErrNotFound
	}
	// The name and its record at one revision: one consistent view.
	id, rec, rev, err := n.ns.Stat(ctx, path)
	n.log.Debug("cluster lookup", zap.String("path", path), zap.String("id", string(id)), zap.Error(err))
	switch {
	case errors.Is(err, namespace.ErrIsDir):
		return n.placeDir(dir, name)
	case err != nil:
		return nil, core.ErrNotFound
	}
	return n.placeRec(ctx, dir, name, id, rec, rev)
}

// SyncDir creates placeholders for the names of a directory the pool does
// not have yet (before a listing).
func (n *Node) SyncDir(ctx context.Context, dir *core.Inode) {
	ctx = uninterrupted(ctx)
	if n == nil {
		return
	}
	path := n.pathOf(dir)
	if path == "" && dir.Ino != n.p.Root().Ino || n.away() {
		return // unlinked, or etcd away
	}
	ents, err := n.ns.List(ctx, path)
	if err != nil {
		if !errors.Is(err, namespace.ErrNotFound) {
			n.log.Debug("cluster listing", zap.String("path", path), zap.Error(err))
		}
		return
	}
	for _, e := range ents {
		if _, err := n.p.Lookup(dir, e.Name); !errors.Is(err, core.ErrNotFound) {
			continue
		}
		if e.Dir {
			_, err = n.placeDir(dir, e.Name)
		} else {
			_, err = n.place(ctx, dir, e.Name, e.ID)
		}
		if err != nil {
			n.log.Debug("cluster placeholder", zap.String("path", join(path, e.Name)), zap.Error(err))
		}
	}
}

func (n *Node) placeDir(dir *core.Inode, name string) (*core.Inode, error) {
	n.names.Lock()
	defer n.names.Unlock()
	if in, err := n.p.Lookup(dir, name); err == nil {
		return in, nil
	}
	a := dir.Attr()
	return n.p.Create(dir, name, core.NewInode{Mode: format.ModeDir | 0o755, UID: a.UID, GID: a.GID})
}

// place makes the placeholder of a committed file: its size, mode, owner
// and mtime, no chunk present.
func (n *Node) place(ctx context.Context, dir *core.Inode, name string, id namespace.FileID) (*core.Inode, error) {
	rec, rev, err := n.ns.File(ctx, id)
	if err != nil {
		return nil, core.ErrNotFound
	}
	return n.placeRec(ctx, dir, name, id, rec, rev)
}

// placeRec is place with the record read.
func (n *Node) placeRec(ctx context.Context, dir *core.Inode, name string, id namespace.FileID, rec namespace.FileRecord, rev int64) (*core.Inode, error) {
	n.names.Lock()
	defer n.names.Unlock()
	if in, err := n.p.Lookup(dir, name); err == nil {
		return in, nil
	}
	n.mu.Lock()
	other := n.byID[id]
	n.mu.Unlock()
	if other != nil {
		// Renamed on another node while this one has it under its old
		// name: the local file moves along, with its chunks.
		if old := n.pathOf(other.in); old != "" {
			if odir, oname, ok := n.parentOf(old); ok {
				if err := n.p.Rename(odir, oname, dir, name, 0); err == nil {
					go n.invalidateEntry(odir.Ino, oname) // not from inside this request
					n.revalidate(ctx, other)
					return other.in, nil
				}
			}
		}
	}
	if rec.IsSymlink() {
		return n.placeSymlinkLocked(dir, name, id, rec, rev)
	}
	in, err := n.p.Create(dir, name, core.NewInode{Mode: format.ModeReg | rec.Mode&format.ModePerm, UID: rec.UID, GID: rec.GID})
	if err != nil {
		return nil, err
	}
	f := &file{in: in, id: id, crc: map[namespace.ChunkIdx]objstore.CRC32C{}}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := n.resetLocked(f, rec, rev); err != nil {
		_ = n.p.Unlink(dir, name)
		return nil, err
	}
	n.mu.Lock()
	n.files[in.Ino] = f
	n.byID[id] = f
	n.mu.Unlock()
	return in, nil
}

// placeSymlinkLocked makes the local copy of a symbolic link committed on
// another node: the whole link is in its record.
// Precondition: n.names is held.
func (n *Node) placeSymlinkLocked(dir *core.Inode, name string, id namespace.FileID, rec namespace.FileRecord, rev int64) (*core.Inode, error) {
	in, err := n.p.Create(dir, name, core.NewInode{Mode: format.ModeLnk | 0o777, UID: rec.UID, GID: rec.GID, Target: rec.Target})
	if err != nil {
		return nil, err
	}
	mt := rec.MtimeTime()
	if err := n.p.Setattr(in, core.SetAttr{Mtime: &mt}); err != nil {
		_ = n.p.Unlink(dir, name)
		return nil, err
	}
	if err := n.registerSymlink(in, id, rec.Version, rev, rec.Mtime); err != nil {
		_ = n.p.Unlink(dir, name)
		return nil, err
	}
	return in, nil
}

// Symlinked shares a symbolic link just made in the pool (symlink(2)): one
// commit makes its name and record visible to every node. On failure the
// caller removes the local link, so a link exists everywhere or nowhere
// but in the namespace: core.ErrExist when another node's file or link has
// the name, ErrCluster when etcd did not answer.
func (n *Node) Symlinked(ctx context.Context, dir *core.Inode, name string, in *core.Inode) error {
	if n == nil {
		return nil
	}
	ctx = uninterrupted(ctx)
	target, err := n.p.Readlink(in)
	if err != nil {
		return err
	}
	path := join(n.pathOf(dir), name)
	if path == "" || namespace.CleanPath(path) != nil {
		return nil // not a name the namespace can hold: stays local
	}
	a := in.Attr()
	rec := namespace.FileRecord{Version: 1, Size: int64(len(target)), Mode: namespace.ModeSymlink | 0o777,
		Mtime: a.Mtime.UnixNano(), UID: a.UID, GID: a.GID, Target: target}
	id := namespace.NewFileID()
	rev, err := n.ns.Commit(ctx, path, id, 0, rec, namespace.Chunks{})
	switch {
	case errors.Is(err, namespace.ErrExists), errors.Is(err, namespace.ErrIsDir):
		return fmt.Errorf("%w: symlink %s: %v", core.ErrExist, path, err)
	case err != nil:
		return ioErr("symlink "+path, err)
	}
	return n.registerSymlink(in, id, rec.Version, rev, rec.Mtime)
}

// registerSymlink records a shared symlink's state (the xattr, as a
// file's), so that its unlink and rename go through the namespace.
func (n *Node) registerSymlink(in *core.Inode, id namespace.FileID, ver namespace.Version, rev, mtime int64) error {
	f := &file{in: in, id: id, ver: ver, base: rev, mtime: mtime, crc: map[namespace.ChunkIdx]objstore.CRC32C{}}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := n.saveLocked(f); err != nil {
		return err
	}
	n.mu.Lock()
	n.files[in.Ino] = f
	n.byID[id] = f
	n.mu.Unlock()
	return nil
}
