package cluster

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// testHookWriterOpened, set only by tests, runs in a writer's Open once
// lockMu is released, before the chunks are filled.
var testHookWriterOpened func()

// Open is the cluster's part of open(2): close-to-open for a reader; for a
// writer the writer lock, then every chunk in the pool unless the open
// truncates. Errors: ErrWriterBusy when another node holds the lock,
// ErrReadOnly for an attached object, ErrCluster when etcd or a fetch
// failed. A nil Handle: a local-only file.
func (n *Node) Open(ctx context.Context, in *core.Inode, write, trunc bool) (*Handle, error) {
	ctx = uninterrupted(ctx)
	if n == nil || in.IsDir() || in.Mode()&format.ModeType != format.ModeReg {
		return nil, nil
	}
	f := n.fileOf(in)
	if f == nil && !write {
		return nil, nil
	}
	if f == nil {
		var err error
		if f, err = n.adopt(in); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	attached := f.src != ""
	f.mu.Unlock()
	if write && attached {
		return nil, fmt.Errorf("%w: an attached object", ErrReadOnly)
	}
	if !write {
		n.revalidate(ctx, f)
		f.mu.Lock()
		f.opens++
		f.mu.Unlock()
		return &Handle{f: f}, nil
	}
	// lockMu orders this node's takes and gives of the writer lock: a
	// close's give (in etcd) ends before the next open's take.
	f.lockMu.Lock()
	f.mu.Lock()
	first, ver := f.writers == 0, f.ver
	f.mu.Unlock()
	if first {
		w, err := n.ns.AcquireWriter(ctx, f.id)
		switch {
		case errors.Is(err, namespace.ErrWriterHeld):
			f.lockMu.Unlock()
			return nil, fmt.Errorf("%w: %v", ErrWriterBusy, err)
		case err != nil && ver > 0:
			f.lockMu.Unlock()
			return nil, ioErr("writer lock", err)
		case err != nil:
			// A file never committed has an id nobody knows: it is
			// written without the lock (its commit still requires that
			// no node holds it), so creating files does not need etcd.
			n.log.Debug("writing a new file without the writer lock", zap.String("id", string(f.id)), zap.Error(err))
		}
		f.mu.Lock()
		f.lock = w
		f.mu.Unlock()
	}
	f.mu.Lock()
	f.writers++
	f.opens++
	f.waitStoresLocked()
	f.mu.Unlock()
	// Holding the lock, nobody commits: the version checked now is the
	// one this writer changes. Checked before lockMu goes, so that a
	// second writer's open cannot count itself in between and make the
	// first one skip the check (revalidateWriter acts for the first only).
	n.revalidateWriter(ctx, f)
	f.lockMu.Unlock()
	if testHookWriterOpened != nil {
		testHookWriterOpened()
	}
	h := &Handle{f: f, write: true}
	if !trunc {
		if err := n.fillAll(ctx, f); err != nil {
			n.Release(h)
			return nil, err
		}
	}
	return h, nil
}

// revalidateWriter is revalidate for the first writer (it holds the
// cluster's writer lock).
// Precondition: f.lockMu is held.
func (n *Node) revalidateWriter(ctx context.Context, f *file) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ver == 0 || f.writers != 1 || f.changed.Len() > 0 {
		return
	}
	rec, rev, err := n.ns.File(ctx, f.id)
	switch {
	case err != nil:
	case rec.Version > f.ver:
		if err := n.resetLocked(f, rec, rev); err == nil {
			go n.invalidate(f.in.Ino)
		}
	case rec.Version == f.ver && rev > f.base:
		// Another node's chmod/chown/utimes: this writer's commit
		// compares against the record as it is now.
		n.applyMetaLocked(f, rec, rev)
		go n.invalidate(f.in.Ino)
	}
}

// Flush commits a writer's changes (close(2)); ErrCluster when the commit
// failed.
func (n *Node) Flush(ctx context.Context, h *Handle) error {
	ctx = uninterrupted(ctx)
	if n == nil || h == nil || !h.write {
		return nil
	}
	return n.commit(ctx, h.f)
}

// Fsync commits the file if this node writes it.
func (n *Node) Fsync(ctx context.Context, in *core.Inode) error {
	ctx = uninterrupted(ctx)
	if n == nil {
		return nil
	}
	f := n.fileOf(in)
	if f == nil {
		return nil
	}
	f.mu.Lock()
	w := f.writers > 0
	f.mu.Unlock()
	if !w {
		return nil
	}
	return n.commit(ctx, f)
}

// Release ends an open: the last writer's close commits what is left and
// gives the writer lock up.
func (n *Node) Release(h *Handle) {
	if n == nil || h == nil {
		return
	}
	f := h.f
	committed := false
	if h.write {
		committed = n.commitAtRelease(f)
		f.lockMu.Lock()
		defer f.lockMu.Unlock()
	}
	f.mu.Lock()
	// A change left to this writer that came after its commit (a chmod:
	// MetaChanged; a truncate: Truncate) is committed before the last
	// writer goes, checked with the writers count it changes.
	for committed && f.writers == 1 && f.dirty && !f.removed {
		f.mu.Unlock()
		committed = n.commitAtRelease(f)
		f.mu.Lock()
	}
	f.opens--
	recheck := f.opens == 0 && f.pending
	if recheck {
		f.pending = false
	}
	var w *namespace.Writer
	if h.write {
		f.writers--
		if f.writers == 0 {
			w, f.lock = f.lock, nil
		}
	}
	f.mu.Unlock()
	if w != nil {
		if err := w.Release(n.ctx); err != nil {
			n.log.Warn("releasing a writer lock (it ends with the node lease)", zap.String("id", string(f.id)), zap.Error(err))
		}
	}
	if recheck {
		// Not from inside this request (RELEASE): no caller waits for
		// it, so a failure is logged and counted.
		go func() {
			if err := n.recheck(f); err != nil {
				n.bg.rechecks.Add(1)
				n.log.Warn("dropping a local copy whose name went elsewhere failed; the name watch or the next open does it",
					zap.String("id", string(f.id)), zap.Uint64("ino", uint64(f.in.Ino)), zap.Error(err))
			}
		}()
	}
}

// commitAtRelease is a writer's commit at its close (RELEASE), which has
// no caller to fail: a failure is logged, and the changes stay local for
// the next commit.
func (n *Node) commitAtRelease(f *file) bool {
	if err := n.commit(n.ctx, f); err != nil {
		n.log.Error("commit at release failed; the file's changes stay local", zap.String("id", string(f.id)), zap.Error(err))
		return false
	}
	return true
}

// recheck does what the watches left undone while f was open: a newer
// version replaces the local copy, a name removed (or given to another
// file) elsewhere goes here too. The error says what could not be done.
func (n *Node) recheck(f *file) error {
	release, ok := n.usePool()
	if !ok {
		return nil // closing
	}
	defer release()
	n.revalidate(n.ctx, f)
	path := n.pathOf(f.in)
	if path == "" {
		return nil
	}
	id, err := n.ns.Lookup(n.ctx, path)
	switch {
	case err == nil && id == f.id:
		return nil // still named so
	case err != nil && !errors.Is(err, namespace.ErrNotFound):
		return fmt.Errorf("looking %s up: %w", path, err) // etcd cannot say
	}
	n.names.Lock()
	dir, name, ok := n.parentOf(path)
	var dropped bool
	if ok {
		if in, err := n.p.Lookup(dir, name); err == nil && in == f.in {
			f.mu.Lock()
			idle := f.opens == 0 && !f.dirty
			f.mu.Unlock()
			if idle {
				if err := n.p.Unlink(dir, name); err != nil {
					n.names.Unlock()
					return fmt.Errorf("unlinking %s: %w", path, err)
				}
				n.Unlinked(in)
				dropped = true
			}
		}
	}
	n.names.Unlock()
	if dropped {
		n.invalidateEntry(dir.Ino, name)
	}
	return nil
}
