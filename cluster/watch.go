package cluster

import (
	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/core"
)

// fileEvent: a commit elsewhere makes an idle local copy the placeholder of
// the new version; an open one is revalidated at its next open.
func (n *Node) fileEvent(ev namespace.FileEvent) {
	if ev.ID == "" || ev.Deleted {
		return
	}
	release, ok := n.usePool()
	if !ok {
		return
	}
	defer release()
	n.mu.Lock()
	f := n.byID[ev.ID]
	n.mu.Unlock()
	if f == nil {
		return
	}
	f.mu.Lock()
	stale := ev.Record.Version > f.ver && f.ver > 0
	meta := ev.Record.Version == f.ver && f.ver > 0 && ev.Rev > f.base
	switch {
	case stale && f.opens == 0 && !f.dirty:
		if err := n.resetLocked(f, ev.Record, ev.Rev); err != nil {
			n.log.Warn("discarding an old version", zap.String("id", string(f.id)), zap.Error(err))
		}
	case meta && f.writers == 0 && !f.dirty:
		n.applyMetaLocked(f, ev.Record, ev.Rev)
	case stale, meta:
		f.pending = true // at the last close
	}
	f.mu.Unlock()
	if stale || meta {
		n.invalidate(f.in.Ino)
	}
}

// nameEvent: a name removed or replaced elsewhere goes here too (when the
// local file is a committed, idle copy); the kernel forgets the entry.
func (n *Node) nameEvent(ev namespace.NameEvent) {
	if ev.Path == "" {
		return
	}
	release, ok := n.usePool()
	if !ok {
		return
	}
	defer release()
	dirIno, name, dropped := n.applyNameEvent(ev)
	if dirIno != 0 {
		n.invalidateEntry(dirIno, name) // after names is unlocked: the kernel may be waiting on it
	}
	if dropped != nil {
		n.invalidate(dropped.Ino)
	}
}

func (n *Node) applyNameEvent(ev namespace.NameEvent) (core.Ino, string, *core.Inode) {
	n.names.Lock()
	defer n.names.Unlock()
	dir, name, ok := n.parentOf(ev.Path)
	if !ok {
		return 0, "", nil
	}
	in, err := n.p.Lookup(dir, name)
	if err != nil {
		return dir.Ino, name, nil
	}
	f := n.fileOf(in)
	if f == nil {
		return dir.Ino, name, nil
	}
	f.mu.Lock()
	gone := f.ver > 0 && (ev.Deleted || ev.ID != f.id)
	drop := gone && f.opens == 0 && !f.dirty
	if gone && !drop {
		f.pending = true // at the last close
	}
	f.mu.Unlock()
	if !drop {
		return dir.Ino, name, nil
	}
	if err := n.p.Unlink(dir, name); err != nil {
		n.log.Debug("dropping a name removed elsewhere", zap.String("path", ev.Path), zap.Error(err))
		return dir.Ino, name, nil
	}
	n.Unlinked(in)
	return dir.Ino, name, in
}
