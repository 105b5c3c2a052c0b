package cluster

import (
	"context"
	"fmt"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/core"
)

// Wrote records a change of [off, off+length) of a cluster file.
func (n *Node) Wrote(in *core.Inode, off, length int64) {
	if n == nil || length <= 0 {
		return
	}
	f := n.fileOf(in)
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dirty = true
	cs := f.cs
	if cs <= 0 {
		cs = n.ns.ChunkSize()
	}
	for i := off / cs; i <= (off+length-1)/cs; i++ {
		f.changed.Add(namespace.ChunkIdx(i))
	}
}

// Truncate runs local, a truncate(2) of in to size, as a writer of a
// committed cluster file that no handle on this node writes: the writer
// lock, the chunks the new size keeps (none for 0), local, then one commit,
// so the other nodes see the new size at once rather than with some later
// writer's close. A file this node writes (ftruncate, or truncate(2) while
// it is open for writing) commits it with its writer's fsync or close, as
// any write (or at once, when that writer closed meanwhile). Errors: ErrWriterBusy while another node writes the file,
// ErrReadOnly for an attached object, ErrCluster when a step failed (the
// local truncate may be done then: it is committed by the next writer).
func (n *Node) Truncate(ctx context.Context, in *core.Inode, size int64, local func() error) error {
	if n == nil {
		return local()
	}
	ctx = uninterrupted(ctx)
	old := int64(in.Attr().Size)
	f := n.fileOf(in)
	if f == nil {
		return local()
	}
	f.mu.Lock()
	own := f.ver == 0 || f.writers > 0
	attached := f.src != ""
	f.mu.Unlock()
	if attached {
		return fmt.Errorf("%w: an attached object", ErrReadOnly)
	}
	if own {
		if err := local(); err != nil {
			return err
		}
		n.Resized(in, old, size)
		// The writer it was left to may have closed between the look
		// at the writers and the truncate: then nobody would commit it.
		f.mu.Lock()
		orphan := f.ver > 0 && f.writers == 0 && f.dirty
		f.mu.Unlock()
		if !orphan {
			return nil
		}
		return n.commitAsWriter(ctx, in)
	}
	h, err := n.Open(ctx, in, true, size == 0)
	if err != nil {
		return err
	}
	defer n.Release(h)
	if err := local(); err != nil {
		return err
	}
	n.Resized(in, old, size)
	return n.Flush(ctx, h)
}

// commitAsWriter commits in's local changes as a short writer: the
// writer lock, the commit, the release.
func (n *Node) commitAsWriter(ctx context.Context, in *core.Inode) error {
	h, err := n.Open(ctx, in, true, false)
	if err != nil {
		return err
	}
	defer n.Release(h)
	return n.Flush(ctx, h)
}

// Resized records a size change (truncate, O_TRUNC, fallocate) of a
// cluster file.
func (n *Node) Resized(in *core.Inode, oldSize, newSize int64) {
	if n == nil || oldSize == newSize {
		return
	}
	lo, hi := min(oldSize, newSize), max(oldSize, newSize)
	n.Wrote(in, lo, max(hi-lo, 1))
}
