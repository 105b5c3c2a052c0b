package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/core"
)

// Fill brings the chunks of [off, off+length) that are not in the pool
// yet, before a read serves them from it.
func (n *Node) Fill(ctx context.Context, in *core.Inode, off, length int64) error {
	ctx = uninterrupted(ctx)
	if n == nil || length <= 0 {
		return nil
	}
	f := n.fileOf(in)
	if f == nil {
		return nil
	}
	return n.fill(ctx, f, off, length, true)
}

// fill brings the chunks of f's version that [off, off+length) covers (up
// to its size) into the pool, then, with ahead, reads ahead of them.
func (n *Node) fill(ctx context.Context, f *file, off, length int64, ahead bool) error {
	for {
		// The version, chunk size and size read together: a newer
		// version met while filling starts the fill again on it.
		f.mu.Lock()
		ver, cs, size := f.ver, f.cs, int64(f.in.Attr().Size)
		f.mu.Unlock()
		if ver == 0 || cs <= 0 || off >= size {
			return nil
		}
		last := (min(off+length, size) - 1) / cs
		err := n.fillChunks(ctx, f, ver, off/cs, last)
		if errors.Is(err, errMoved) {
			continue
		}
		if err == nil && ahead {
			n.readAhead(f, ver, last+1, size, cs)
		}
		return err
	}
}

// fillChunks fills chunks first to last of version ver of f; errMoved
// when f moved on to another version meanwhile.
func (n *Node) fillChunks(ctx context.Context, f *file, ver namespace.Version, first, last int64) error {
	for i := first; i <= last; i++ {
		if err := n.fillChunk(ctx, f, ver, namespace.ChunkIdx(i)); err != nil {
			return err
		}
	}
	return nil
}

// readAhead starts fetching up to readAheadChunks chunks from next on
// (one goroutine per chunk, not one per read), while the reader reads the
// chunks it waited for: a sequential load then keeps several fetches in
// flight, from different holders. The node runs at most
// maxReadAheadFetches at once, so readers of many files do not hold
// gigabytes of chunks in flight; a read-ahead that finds no slot is
// started by a later read.
func (n *Node) readAhead(f *file, ver namespace.Version, next, size, cs int64) {
	for i := next; i < next+readAheadChunks && i*cs < size; i++ {
		c := namespace.ChunkIdx(i)
		f.mu.Lock()
		start := !f.present.Has(c) && !f.ahead.Has(c) && f.storing[c] == nil
		if start {
			select {
			case n.aheadSlots <- struct{}{}:
				f.ahead.Add(c)
			default:
				start = false
			}
		}
		f.mu.Unlock()
		if !start {
			continue
		}
		go func() {
			// Nobody waits for a read-ahead: a failure is counted, and
			// the read that needs the chunk fetches it again and returns
			// its own error.
			if err := n.fillChunk(n.ctx, f, ver, c); err != nil && !errors.Is(err, errMoved) {
				n.bg.readAheads.Add(1)
				n.log.Debug("read-ahead failed; the read that needs the chunk fetches it again",
					zap.String("id", string(f.id)), zap.Int64("chunk", int64(c)), zap.Error(err))
			}
			f.mu.Lock()
			f.ahead.Remove(c)
			f.mu.Unlock()
			<-n.aheadSlots
		}()
	}
}

// fillAll brings every chunk of f's version into the pool (a writer's open
// without O_TRUNC).
func (n *Node) fillAll(ctx context.Context, f *file) error {
	return n.fill(ctx, f, 0, math.MaxInt64, false)
}

// fillChunk fetches chunk i of version ver of f unless it is present (or
// was changed locally, whose bytes are the writer's), and returns once it
// is in the pool; errMoved when f is at another version than ver, before
// or after the fetch (the chunk fetched is then not the file's).
// ver is never 0: its callers return before for a file never committed.
func (n *Node) fillChunk(ctx context.Context, f *file, ver namespace.Version, i namespace.ChunkIdx) error {
	f.mu.Lock()
	if f.ver != ver {
		f.mu.Unlock()
		return errMoved
	}
	if f.present.Has(i) || f.changed.Has(i) || f.inflight.Has(i) {
		f.mu.Unlock()
		return nil
	}
	ref := objstore.ChunkRef{File: objstore.FileID(f.id), Ver: objstore.Version(ver), Idx: objstore.ChunkIdx(i)}
	f.mu.Unlock()
	data, src, err := n.peer.Fetch(ctx, ref)
	n.log.Debug("chunk fetched", zap.Stringer("chunk", ref), zap.Stringer("source", src), zap.Error(err))
	if err != nil {
		if !f.at(ver) {
			return errMoved
		}
		return ioErr(fmt.Sprintf("fetching chunk %s", ref), err)
	}
	// Fetch stored it through StoreChunk (then the checksum is not taken
	// again); when it came from the memory cache, or StoreChunk could not,
	// it goes in now.
	err = n.storeInFile(f, ref, data, func() objstore.CRC32C { return objstore.Checksum(data) })
	if !f.at(ver) {
		return errMoved
	}
	return err
}

// at reports whether f is at version ver.
func (f *file) at(ver namespace.Version) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ver == ver
}

// storeInFile writes a verified chunk into f if f is still at its version,
// and returns once the chunk is in the pool (stored by this call or by a
// concurrent one). The bytes are written and flushed without f.mu held;
// crc is called only when the chunk is written.
func (n *Node) storeInFile(f *file, ref objstore.ChunkRef, data []byte, crc func() objstore.CRC32C) error {
	release, ok := n.usePool()
	if !ok {
		return fmt.Errorf("%w: chunk %s: unmounting", ErrCluster, ref)
	}
	defer release()
	n.roomFor(f, ref, int64(len(data))) // the low watermark (evict.go)
	i := namespace.ChunkIdx(ref.Idx)
	f.mu.Lock()
	for {
		if objstore.Version(f.ver) != ref.Ver || f.removed {
			f.mu.Unlock()
			return fmt.Errorf("%w: chunk %s: the file moved on to version %d", ErrCluster, ref, f.ver)
		}
		if f.present.Has(i) || f.changed.Has(i) || f.inflight.Has(i) {
			f.mu.Unlock()
			return nil
		}
		ch := f.storing[i]
		if ch == nil {
			break
		}
		f.mu.Unlock()
		<-ch // another store of it: its outcome decides
		f.mu.Lock()
	}
	if f.storing == nil {
		f.storing = map[namespace.ChunkIdx]chan struct{}{}
	}
	done := make(chan struct{})
	f.storing[i] = done
	off := int64(ref.Idx) * f.cs
	f.mu.Unlock()
	sum := crc()
	_, err := n.writeChunk(f, off, data) // evicts and retries on ENOSPC (evict.go)
	if err == nil {
		// The bytes are durable before the state says they are present.
		err = n.p.Fsync(f.in)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.storing, i)
	close(done)
	if err != nil {
		return err
	}
	if objstore.Version(f.ver) != ref.Ver || f.removed || f.changed.Has(i) || f.inflight.Has(i) {
		// Reset to a newer version (which drops what was present) or
		// written meanwhile: these bytes are not the chunk of any state.
		return nil
	}
	// The fill is no change of the file: its mtime stays the committed one.
	mt := time.Unix(0, f.mtime)
	if err := n.p.Setattr(f.in, core.SetAttr{Mtime: &mt}); err != nil {
		return err
	}
	f.present.Add(i)
	f.crc[i] = sum
	n.used(f, i)
	n.cache.drop(ref)
	if err := n.saveLocked(f); err != nil {
		return err
	}
	n.ns.AddHolding(f.id, f.ver, i)
	return nil
}
