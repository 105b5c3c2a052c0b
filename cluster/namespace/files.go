package namespace

import (
	"context"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// File returns a file's committed record and the etcd mod revision it was
// read at: the base a following Commit compares against. ErrNotFound when
// there is no record (never committed, or removed).
func (ns *NS) File(ctx context.Context, id FileID) (FileRecord, int64, error) {
	if err := id.Valid(); err != nil {
		return FileRecord{}, 0, err
	}
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	k := ns.fileKey(id)
	resp, err := ns.get(ctx, "file "+string(id), k)
	if err != nil {
		return FileRecord{}, 0, err
	}
	if len(resp.Kvs) == 0 {
		return FileRecord{}, 0, fmt.Errorf("%w: file %s", ErrNotFound, id)
	}
	rec, err := decodeFile(k, resp.Kvs[0].Value)
	return rec, resp.Kvs[0].ModRevision, err
}

// Stat returns the file a path names with its record and that record's
// mod revision, both read at one etcd revision (an open: one consistent
// view of name and version). Errors as Lookup's and File's.
func (ns *NS) Stat(ctx context.Context, path string) (FileID, FileRecord, int64, error) {
	if err := CleanPath(path); err != nil {
		return "", FileRecord{}, 0, err
	}
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	k := ns.nameKey(path)
	resp, _, err := ns.txn(ctx, "stat "+path, nil, []clientv3.Op{
		clientv3.OpGet(k),
		clientv3.OpGet(k+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
	}, nil)
	if err != nil {
		return "", FileRecord{}, 0, err
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		if resp.Responses[1].GetResponseRange().GetCount() > 0 {
			return "", FileRecord{}, 0, fmt.Errorf("%w: %s", ErrIsDir, path)
		}
		return "", FileRecord{}, 0, fmt.Errorf("%w: %s", ErrNotFound, path)
	}
	id, err := decodeName(k, kvs[0].Value)
	if err != nil {
		return "", FileRecord{}, 0, err
	}
	fk := ns.fileKey(id)
	fresp, err := ns.get(ctx, "stat "+path, fk, clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return "", FileRecord{}, 0, err
	}
	if len(fresp.Kvs) == 0 {
		return "", FileRecord{}, 0, fmt.Errorf("%w: %s names file %s, which has no record", ErrNotFound, path, id)
	}
	rec, err := decodeFile(fk, fresp.Kvs[0].Value)
	return id, rec, fresp.Kvs[0].ModRevision, err
}

// Commit makes a new version of a file visible: the one transaction of the
// design (the package doc's Transactions), after its chunks and manifest
// are in the object store. It succeeds only if files/<id> is still at the mod
// revision base the caller read (0: the file was never committed, and then
// path must name nothing yet, and it is named in the same transaction);
// rec.Version must be the read version + 1 (1 for a new file). This node
// becomes the holder of the chunks given, under its lease. When this node
// holds the file's writer lock, the transaction also requires that it
// still does (ErrWriterLost); when it does not, that no node does
// (ErrWriterHeld).
//
// It returns the new record's mod revision (the base of the next commit).
// ErrConflict when another commit (or a remove) came first, ErrExists
// when a new file's path names another file (ErrIsDir, ErrNotDir when it
// cannot be a file), ErrWriterLost when the writer lock was lost, ErrUnavailable when
// etcd did not answer: in every failure nothing of it is visible.
func (ns *NS) Commit(ctx context.Context, path string, id FileID, base int64, rec FileRecord, held Chunks) (int64, error) {
	if err := CleanPath(path); err != nil {
		return 0, err
	}
	if err := id.Valid(); err != nil {
		return 0, err
	}
	if err := rec.check(); err != nil {
		return 0, err
	}
	if base == 0 && rec.Version != 1 {
		return 0, fmt.Errorf("%w: the first commit of %s is version 1, not %d", ErrInvalid, id, rec.Version)
	}
	lease, err := ns.currentLease()
	if err != nil {
		return 0, err
	}
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	fk, nk := ns.fileKey(id), ns.nameKey(path)
	fv := FileVersion{File: id, Ver: rec.Version}
	val := mustJSON(rec)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(fk), "=", base)}
	ops := []clientv3.Op{clientv3.OpPut(fk, val)}
	if base == 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(nk), "=", 0))
		cmps = append(cmps, ns.placeCmps(path)...)
		ops = append(ops, clientv3.OpPut(nk, mustJSON(nameRecord{ID: id})))
	}
	ns.mu.Lock()
	wl, holdsLock := ns.writers[id]
	if held.Len() > 0 {
		all := ns.holdings[fv].Clone()
		all.Union(held)
		held = all
	}
	ns.mu.Unlock()
	if holdsLock && wl != lease {
		return 0, fmt.Errorf("%w: commit %s (%s): the node lease it was taken under ended", ErrWriterLost, path, id)
	}
	if holdsLock {
		cmps = append(cmps, clientv3.Compare(clientv3.LeaseValue(ns.writerKey(id)), "=", wl))
	} else {
		// Nobody else may be writing it either.
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(ns.writerKey(id)), "=", 0))
	}
	if held.Len() > 0 {
		ops = append(ops, clientv3.OpPut(ns.holderKey(fv, ns.cfg.Node), mustJSON(holderRecord{Chunks: held.String()}), clientv3.WithLease(lease)))
	}
	resp, ambiguous, err := ns.txn(ctx, "commit "+path, cmps, ops, []clientv3.Op{
		clientv3.OpGet(fk), clientv3.OpGet(nk), clientv3.OpGet(ns.writerKey(id)),
	})
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		fkv := resp.Responses[0].GetResponseRange().GetKvs()
		wkv := resp.Responses[2].GetResponseRange().GetKvs()
		switch {
		case ambiguous && len(fkv) > 0 && fkv[0].ModRevision > base && string(fkv[0].Value) == val:
			// An attempt that seemed to fail was applied: the record is
			// ours, byte for byte (its mtime and manifest key with it).
			ns.noteHeld(lease, fv, held)
			return fkv[0].ModRevision, nil
		case holdsLock && (len(wkv) == 0 || clientv3.LeaseID(wkv[0].Lease) != wl):
			return 0, fmt.Errorf("%w: commit %s (%s)", ErrWriterLost, path, id)
		case !holdsLock && len(wkv) > 0:
			var w writerRecord
			decode(string(wkv[0].Key), wkv[0].Value, &w)
			return 0, fmt.Errorf("%w: commit %s (%s): node %s holds the writer lock", ErrWriterHeld, path, id, w.Node)
		case len(fkv) > 0 && fkv[0].ModRevision != base:
			cur, _ := decodeFile(fk, fkv[0].Value)
			return 0, fmt.Errorf("%w: commit %s (%s) version %d: version %d was committed meanwhile", ErrConflict, path, id, rec.Version, cur.Version)
		case len(fkv) == 0 && base != 0:
			return 0, fmt.Errorf("%w: commit %s (%s): the file was removed meanwhile", ErrConflict, path, id)
		}
		if nkv := resp.Responses[1].GetResponseRange().GetKvs(); base == 0 && len(nkv) > 0 {
			return 0, fmt.Errorf("%w: commit %s (%s): the path names another file", ErrExists, path, id)
		}
		if err := ns.placeError(ctx, path); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: commit %s (%s): raced with another transaction", ErrConflict, path, id)
	}
	ns.noteHeld(lease, fv, held)
	return resp.Header.Revision, nil
}

// Meta is the part of a file's record that chmod, chown and utimes change
// without a new version.
type Meta struct {
	Mode     uint32
	UID, GID uint32
	Mtime    int64 // unix ns
}

// SetMeta changes a committed file's mode, owner and mtime in place: the
// version, size and chunks stay, so no node drops what it holds. It
// succeeds only if files/<id> is still at mod revision base and no node
// holds the writer lock but this one (a writer's next commit would
// otherwise be refused for the changed revision); it returns the record's
// new mod revision. ErrConflict when the record changed meanwhile (read it
// again and retry), ErrWriterHeld when another node writes the file,
// ErrNotFound when it was removed, ErrUnavailable when etcd did not answer.
func (ns *NS) SetMeta(ctx context.Context, id FileID, base int64, m Meta) (FileRecord, int64, error) {
	if err := id.Valid(); err != nil {
		return FileRecord{}, 0, err
	}
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	fk := ns.fileKey(id)
	resp, err := ns.get(ctx, "setattr "+string(id), fk)
	if err != nil {
		return FileRecord{}, 0, err
	}
	if len(resp.Kvs) == 0 {
		return FileRecord{}, 0, fmt.Errorf("%w: file %s", ErrNotFound, id)
	}
	if resp.Kvs[0].ModRevision != base {
		return FileRecord{}, 0, fmt.Errorf("%w: setattr %s: the record changed at revision %d (read at %d)", ErrConflict, id, resp.Kvs[0].ModRevision, base)
	}
	rec, err := decodeFile(fk, resp.Kvs[0].Value)
	if err != nil {
		return FileRecord{}, 0, err
	}
	rec.Mode = rec.Mode&ModeTypeMask | m.Mode&^ModeTypeMask
	rec.UID, rec.GID, rec.Mtime = m.UID, m.GID, m.Mtime
	if err := rec.check(); err != nil {
		return FileRecord{}, 0, err
	}
	val := mustJSON(rec)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(fk), "=", base)}
	ns.mu.Lock()
	wl, holdsLock := ns.writers[id]
	ns.mu.Unlock()
	if holdsLock {
		cmps = append(cmps, clientv3.Compare(clientv3.LeaseValue(ns.writerKey(id)), "=", wl))
	} else {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(ns.writerKey(id)), "=", 0))
	}
	tresp, ambiguous, err := ns.txn(ctx, "setattr "+string(id), cmps, []clientv3.Op{clientv3.OpPut(fk, val)},
		[]clientv3.Op{clientv3.OpGet(fk), clientv3.OpGet(ns.writerKey(id))})
	if err != nil {
		return FileRecord{}, 0, err
	}
	if !tresp.Succeeded {
		fkv := tresp.Responses[0].GetResponseRange().GetKvs()
		wkv := tresp.Responses[1].GetResponseRange().GetKvs()
		switch {
		case ambiguous && len(fkv) > 0 && fkv[0].ModRevision > base && string(fkv[0].Value) == val:
			return rec, fkv[0].ModRevision, nil // an attempt that seemed to fail was applied
		case len(fkv) == 0:
			return FileRecord{}, 0, fmt.Errorf("%w: file %s was removed meanwhile", ErrNotFound, id)
		case fkv[0].ModRevision != base:
			return FileRecord{}, 0, fmt.Errorf("%w: setattr %s: the record changed meanwhile", ErrConflict, id)
		case len(wkv) > 0:
			var w writerRecord
			decode(string(wkv[0].Key), wkv[0].Value, &w)
			return FileRecord{}, 0, fmt.Errorf("%w: setattr %s: node %s holds the writer lock", ErrWriterHeld, id, w.Node)
		}
		return FileRecord{}, 0, fmt.Errorf("%w: setattr %s: raced with another transaction", ErrConflict, id)
	}
	return rec, tresp.Header.Revision, nil
}

// noteHeld records a holder record a commit wrote under lease.
func (ns *NS) noteHeld(lease clientv3.LeaseID, fv FileVersion, held Chunks) {
	if held.Len() == 0 {
		return
	}
	ns.mu.Lock()
	if ns.lease == lease {
		ns.holdings[fv] = held
	}
	ns.mu.Unlock()
}

// FileEvent is a change of a file record seen by WatchFiles.
type FileEvent struct {
	ID      FileID
	Record  FileRecord // zero when Deleted
	Deleted bool       // removed (unlinked, or replaced by a rename)
	Rev     int64      // the record's mod revision (the event's revision)
	// Resync: the watch lost its history (etcd compacted it) and
	// restarted from a listing: one event with Resync and no ID comes
	// first (drop cached state: removals in the gap are not reported),
	// then one with Resync for every record listed.
	Resync bool
}

// WatchFiles calls fn for every change of a file record from now on, in
// revision order, one call at a time (fn must not block: Close waits for
// it), until ctx is done or the NS closed;
// it returns once the watch is in place, so every commit after it is
// delivered. A watch broken by a lost member or leader resumes where it
// was, on another member.
func (ns *NS) WatchFiles(ctx context.Context, fn func(FileEvent)) error {
	prefix := ns.key("files/")
	return ns.watch(ctx, prefix, func(kv *mvccpb.KeyValue, deleted, resync bool) {
		fe := FileEvent{ID: FileID(strings.TrimPrefix(string(kv.Key), prefix)), Rev: kv.ModRevision, Deleted: deleted, Resync: resync}
		if resync && kv.Key == nil {
			fn(fe)
			return
		}
		if !deleted {
			rec, err := decodeFile(string(kv.Key), kv.Value)
			if err != nil {
				ns.log.Warn("skipping a file record", zap.Error(err))
				return
			}
			fe.Record = rec
		}
		fn(fe)
	})
}

// NameEvent is a change of a name seen by WatchNames.
type NameEvent struct {
	Path    string
	ID      FileID // zero when Deleted
	Deleted bool   // unlinked or renamed away
	Rev     int64
	// Resync: as FileEvent's.
	Resync bool
}

// WatchNames calls fn for every name created, replaced or deleted from now
// on (a rename is a delete and a create in one revision), as WatchFiles:
// for invalidating other nodes' directory caches.
func (ns *NS) WatchNames(ctx context.Context, fn func(NameEvent)) error {
	prefix := ns.key("names/")
	return ns.watch(ctx, prefix, func(kv *mvccpb.KeyValue, deleted, resync bool) {
		ne := NameEvent{Path: strings.TrimPrefix(string(kv.Key), prefix), Rev: kv.ModRevision, Deleted: deleted, Resync: resync}
		if resync && kv.Key == nil {
			fn(ne)
			return
		}
		if !deleted {
			id, err := decodeName(string(kv.Key), kv.Value)
			if err != nil {
				ns.log.Warn("skipping a name", zap.Error(err))
				return
			}
			ne.ID = id
		}
		fn(ne)
	})
}

// watch follows prefix from the current revision on, calling fn for each
// change; after a compaction it calls fn once with resync and a nil key,
// then with resync for every key listed again. It returns once the watch
// is in place.
func (ns *NS) watch(ctx context.Context, prefix string, fn func(kv *mvccpb.KeyValue, deleted, resync bool)) error {
	octx, cancel := ns.opCtx(ctx)
	resp, err := ns.get(octx, "watching "+prefix, ns.key("fsid"), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return err
	}
	apply := func(evs []*clientv3.Event) {
		for _, ev := range evs {
			fn(ev.Kv, ev.Type == clientv3.EventTypeDelete, false)
		}
	}
	relist := func(ctx context.Context) (int64, error) {
		resp, err := ns.get(ctx, "listing "+prefix, prefix, clientv3.WithPrefix())
		if err != nil {
			return 0, err
		}
		fn(&mvccpb.KeyValue{ModRevision: resp.Header.Revision}, false, true)
		for _, kv := range resp.Kvs {
			fn(kv, false, true)
		}
		return resp.Header.Revision, nil
	}
	// The watch stops with whichever ends first, ctx or the NS.
	wctx, wcancel := context.WithCancel(ns.ctx)
	ns.wg.Add(1)
	go func() {
		defer ns.wg.Done()
		select {
		case <-ctx.Done():
		case <-wctx.Done():
		}
		wcancel()
	}()
	ns.wg.Add(1)
	go func() {
		defer ns.wg.Done()
		ns.follow(wctx, prefix, resp.Header.Revision, relist, apply)
	}()
	return nil
}
