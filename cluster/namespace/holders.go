package namespace

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// flushDelay gathers AddHolding calls into one write: a reader that
// stores chunk after chunk updates its record a few times a second, not
// once per chunk.
const flushDelay = 50 * time.Millisecond

func (ns *NS) holderKey(fv FileVersion, node NodeID) string {
	return ns.key("holders/" + string(fv.File) + "/" + strconv.FormatUint(uint64(fv.Ver), 10) + "/" + string(node))
}

func (ns *NS) writerKey(id FileID) string { return ns.key("writers/" + string(id)) }

// AddHolding records that this node holds these chunks of (id, ver) in its
// pool. The record (holders/<id>/<ver>/<node>, bound to the node lease) is
// written shortly after, batched with other calls; Flush writes it now.
// Adding chunks already recorded changes nothing.
func (ns *NS) AddHolding(id FileID, ver Version, chunks ...ChunkIdx) {
	fv := FileVersion{File: id, Ver: ver}
	ns.mu.Lock()
	c := ns.holdings[fv]
	if c.Add(chunks...) {
		ns.holdings[fv] = c
		ns.dirty[fv] = true
	}
	ns.mu.Unlock()
	ns.kickFlush()
}

// RemoveHolding records that these chunks of (id, ver) left this node's
// pool; the record is deleted when none is left. Written as AddHolding's.
func (ns *NS) RemoveHolding(id FileID, ver Version, chunks ...ChunkIdx) {
	fv := FileVersion{File: id, Ver: ver}
	ns.mu.Lock()
	c, ok := ns.holdings[fv]
	if ok && c.Remove(chunks...) {
		ns.holdings[fv] = c
		ns.dirty[fv] = true
	}
	ns.mu.Unlock()
	ns.kickFlush()
}

// DropHolding removes this node's holder record of (id, ver) (its chunks
// left the pool).
func (ns *NS) DropHolding(ctx context.Context, id FileID, ver Version) error {
	fv := FileVersion{File: id, Ver: ver}
	ns.flushMu.Lock()
	defer ns.flushMu.Unlock()
	ns.mu.Lock()
	delete(ns.holdings, fv)
	delete(ns.dirty, fv)
	ns.mu.Unlock()
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	_, _, err := ns.txn(ctx, "dropping a holder record", nil, []clientv3.Op{clientv3.OpDelete(ns.holderKey(fv, ns.cfg.Node))}, nil)
	return err
}

// Held returns this node's holdings as recorded (or about to be).
func (ns *NS) Held() map[FileVersion]Chunks {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	out := make(map[FileVersion]Chunks, len(ns.holdings))
	for fv, c := range ns.holdings {
		if c.Len() > 0 {
			out[fv] = c.Clone()
		}
	}
	return out
}

func (ns *NS) kickFlush() {
	select {
	case ns.flushKick <- struct{}{}:
	default:
	}
}

// flusher writes dirty holder records after flushDelay, retrying while
// etcd is unreachable.
func (ns *NS) flusher() {
	defer ns.wg.Done()
	for {
		select {
		case <-ns.ctx.Done():
			return
		case <-ns.flushKick:
		}
		select {
		case <-ns.ctx.Done():
			return
		case <-time.After(flushDelay):
		}
		ctx, cancel := context.WithTimeout(ns.ctx, ns.cfg.OpTimeout)
		err := ns.Flush(ctx)
		cancel()
		if _, lerr := ns.currentLease(); err == nil || lerr != nil || ns.ctx.Err() != nil {
			// Done, or no lease: registering again rewrites them all.
			continue
		}
		ns.log.Warn("writing holder records", zap.Error(err))
		time.AfterFunc(time.Second, ns.kickFlush)
	}
}

// Flush writes this node's changed holder records now.
func (ns *NS) Flush(ctx context.Context) error {
	ns.flushMu.Lock()
	defer ns.flushMu.Unlock()
	lease, err := ns.currentLease()
	if err != nil {
		return err
	}
	ns.mu.Lock()
	var ops []clientv3.Op
	var fvs []FileVersion
	for fv := range ns.dirty {
		c := ns.holdings[fv]
		if c.Len() == 0 {
			// Its last chunk left: the record goes (the empty set stays
			// in holdings until then, so a failed write is retried).
			ops = append(ops, clientv3.OpDelete(ns.holderKey(fv, ns.cfg.Node)))
		} else {
			ops = append(ops, clientv3.OpPut(ns.holderKey(fv, ns.cfg.Node), mustJSON(holderRecord{Chunks: c.String()}), clientv3.WithLease(lease)))
		}
		fvs = append(fvs, fv)
	}
	ns.dirty = map[FileVersion]bool{}
	ns.mu.Unlock()
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	for i := 0; i < len(ops); i += ns.cfg.MaxTxnOps {
		j := min(i+ns.cfg.MaxTxnOps, len(ops))
		if _, _, err := ns.txn(ctx, "writing holder records", nil, ops[i:j], nil); err != nil {
			ns.mu.Lock()
			for _, fv := range fvs[i:] {
				if _, ok := ns.holdings[fv]; ok {
					ns.dirty[fv] = true
				}
			}
			ns.mu.Unlock()
			return err
		}
	}
	ns.mu.Lock()
	for _, fv := range fvs {
		if c, ok := ns.holdings[fv]; ok && c.Len() == 0 && !ns.dirty[fv] {
			delete(ns.holdings, fv)
		}
	}
	ns.mu.Unlock()
	return nil
}

// Holders returns the live nodes whose holder record of (id, ver) lists
// the chunk, in random order (readers spread over them), this node
// excluded.
func (ns *NS) Holders(ctx context.Context, id FileID, ver Version, chunk ChunkIdx) ([]NodeInfo, error) {
	all, err := ns.HoldersOf(ctx, id, ver)
	if err != nil {
		return nil, err
	}
	var out []NodeInfo
	ns.mu.Lock()
	for node, c := range all {
		if n, live := ns.nodes[node]; live && node != ns.cfg.Node && c.Has(chunk) {
			out = append(out, n)
		}
	}
	ns.mu.Unlock()
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, nil
}

// HoldersOf returns every holder record of (id, ver): node → chunks.
func (ns *NS) HoldersOf(ctx context.Context, id FileID, ver Version) (map[NodeID]Chunks, error) {
	if err := id.Valid(); err != nil {
		return nil, err
	}
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	prefix := ns.holderKey(FileVersion{File: id, Ver: ver}, "") // ends in "/"
	resp, err := ns.get(ctx, "holders of "+string(id), prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := map[NodeID]Chunks{}
	for _, kv := range resp.Kvs {
		var r holderRecord
		if err := decode(string(kv.Key), kv.Value, &r); err != nil {
			ns.log.Warn("skipping a holder record", zap.Error(err))
			continue
		}
		c, err := ParseChunks(r.Chunks)
		if err != nil {
			ns.log.Warn("skipping a holder record", zap.String("key", string(kv.Key)), zap.Error(err))
			continue
		}
		out[NodeID(strings.TrimPrefix(string(kv.Key), prefix))] = c
	}
	return out, nil
}

// Superseded returns which of the given versions are no longer current:
// their file's record names a later version, or the file is gone. A node
// that rejoins asks this of what its pool holds and drops those chunks.
func (ns *NS) Superseded(ctx context.Context, held []FileVersion) ([]FileVersion, error) {
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	var out []FileVersion
	for i := 0; i < len(held); i += ns.cfg.MaxTxnOps {
		batch := held[i:min(i+ns.cfg.MaxTxnOps, len(held))]
		ops := make([]clientv3.Op, len(batch))
		for j, fv := range batch {
			if err := fv.File.Valid(); err != nil {
				return nil, err
			}
			ops[j] = clientv3.OpGet(ns.fileKey(fv.File))
		}
		resp, _, err := ns.txn(ctx, "reading file records", nil, ops, nil)
		if err != nil {
			return nil, err
		}
		for j, fv := range batch {
			kvs := resp.Responses[j].GetResponseRange().GetKvs()
			if len(kvs) == 0 {
				out = append(out, fv)
				continue
			}
			rec, err := decodeFile(string(kvs[0].Key), kvs[0].Value)
			if err != nil {
				return nil, err
			}
			if rec.Version > fv.Ver {
				out = append(out, fv)
			}
		}
	}
	return out, nil
}

// DropSuperseded removes this node's holder records of versions that are
// no longer current (Superseded) and returns them, so the caller frees
// their chunks from the pool.
func (ns *NS) DropSuperseded(ctx context.Context) ([]FileVersion, error) {
	var held []FileVersion
	for fv := range ns.Held() {
		held = append(held, fv)
	}
	stale, err := ns.Superseded(ctx, held)
	if err != nil {
		return nil, err
	}
	for _, fv := range stale {
		if err := ns.DropHolding(ctx, fv.File, fv.Ver); err != nil {
			return nil, err
		}
	}
	return stale, nil
}

// Writer is a held writer lock (writers/<id>, bound to the node lease).
type Writer struct {
	ns    *NS
	id    FileID
	lease clientv3.LeaseID
}

// AcquireWriter takes the one-writer lock of a file for this node.
// ErrWriterHeld (naming the holder) when a node holds it, this one
// included: a node counts its own opens for writing itself. The lock
// ends with Release, Close, or the node lease.
func (ns *NS) AcquireWriter(ctx context.Context, id FileID) (*Writer, error) {
	if err := id.Valid(); err != nil {
		return nil, err
	}
	lease, err := ns.currentLease()
	if err != nil {
		return nil, err
	}
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	k := ns.writerKey(id)
	ns.mu.Lock()
	wl, ok := ns.writers[id]
	mine := ok && wl == lease
	ns.mu.Unlock()
	resp, ambiguous, err := ns.txn(ctx, "taking the writer lock of "+string(id),
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(k, mustJSON(writerRecord{Node: ns.cfg.Node, Since: time.Now().UnixNano()}), clientv3.WithLease(lease))},
		[]clientv3.Op{clientv3.OpGet(k)})
	if err != nil {
		return nil, err
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); !resp.Succeeded && ambiguous && !mine && len(kvs) > 0 && clientv3.LeaseID(kvs[0].Lease) == lease {
		resp.Succeeded = true // an attempt that seemed to fail took it
	}
	if !resp.Succeeded {
		holder := "another node"
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			var w writerRecord
			if decode(k, kvs[0].Value, &w) == nil {
				holder = fmt.Sprintf("node %s since %s", w.Node, time.Unix(0, w.Since).UTC().Format(time.RFC3339))
			}
		}
		return nil, fmt.Errorf("%w: file %s: held by %s", ErrWriterHeld, id, holder)
	}
	ns.mu.Lock()
	ns.writers[id] = lease
	ns.mu.Unlock()
	return &Writer{ns: ns, id: id, lease: lease}, nil
}

// Release gives the writer lock up (only if this node still holds it
// under the same lease: a lock lost with the lease is someone else's).
func (w *Writer) Release(ctx context.Context) error {
	ns := w.ns
	ns.mu.Lock()
	if ns.writers[w.id] == w.lease {
		delete(ns.writers, w.id)
	}
	ns.mu.Unlock()
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	k := ns.writerKey(w.id)
	_, _, err := ns.txn(ctx, "releasing the writer lock of "+string(w.id),
		[]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(k), "=", w.lease)},
		[]clientv3.Op{clientv3.OpDelete(k)}, nil)
	return err
}
