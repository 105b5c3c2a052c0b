package cluster

import (
	"context"
	"errors"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/core"
)

// Unlink removes a name: a committed file's from the namespace first
// (ErrCluster when etcd refuses: then neither goes), then the pool's
// (local, core's unlink).
func (n *Node) Unlink(ctx context.Context, dir *core.Inode, name string, local func() error) error {
	if n == nil {
		return local()
	}
	ctx = uninterrupted(ctx)
	n.names.Lock()
	defer n.names.Unlock()
	in, err := n.p.Lookup(dir, name)
	if err != nil {
		return local()
	}
	if f := n.fileOf(in); f != nil {
		f.mu.Lock()
		committed := f.ver > 0
		f.mu.Unlock()
		if committed {
			path := join(n.pathOf(dir), name)
			if err := n.ns.Remove(ctx, path); err != nil && !errors.Is(err, namespace.ErrNotFound) {
				return ioErr("unlink "+path, err)
			}
		}
	}
	if err := local(); err != nil {
		return err
	}
	n.Unlinked(in)
	return nil
}

// Unlinked drops the state of a file whose last name went.
func (n *Node) Unlinked(in *core.Inode) {
	if n == nil || in == nil {
		return
	}
	a := in.Attr()
	if a.Nlink > 0 {
		return
	}
	f := n.fileOf(in)
	if f == nil {
		return
	}
	f.mu.Lock()
	f.removed = true
	ver := f.ver
	f.mu.Unlock()
	n.forget(f)
	if ver > 0 {
		n.dropHolding(f.id, ver, in.Ino)
	}
}

// Rename moves a name: in the namespace first (a committed file, or a
// directory with committed names below it; ErrCluster when etcd refuses),
// then in the pool (local, core's rename).
func (n *Node) Rename(ctx context.Context, dir *core.Inode, name string, newDir *core.Inode, newName string, local func() error) error {
	if n == nil {
		return local()
	}
	ctx = uninterrupted(ctx)
	n.names.Lock()
	defer n.names.Unlock()
	in, err := n.p.Lookup(dir, name)
	if err != nil {
		return n.renameLocal(newDir, newName, local)
	}
	if !in.IsDir() {
		f := n.fileOf(in)
		if f == nil {
			return n.renameLocal(newDir, newName, local)
		}
		f.mu.Lock()
		committed := f.ver > 0
		f.mu.Unlock()
		if !committed {
			return n.renameLocal(newDir, newName, local)
		}
	}
	oldPath, newPath := join(n.pathOf(dir), name), join(n.pathOf(newDir), newName)
	if err := n.ns.Rename(ctx, oldPath, newPath); err != nil && !errors.Is(err, namespace.ErrNotFound) {
		return ioErr("rename "+oldPath, err)
	}
	return n.renameLocal(newDir, newName, local)
}

// renameLocal runs the pool's rename and forgets a file it replaced.
func (n *Node) renameLocal(newDir *core.Inode, newName string, local func() error) error {
	replaced, _ := n.p.Lookup(newDir, newName)
	if err := local(); err != nil {
		return err
	}
	if replaced != nil {
		n.Unlinked(replaced) // its state goes with its last name
	}
	return nil
}
