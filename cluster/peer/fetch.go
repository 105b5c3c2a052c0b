package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/dnnfs/dnnfs/cluster/objstore"
)

// maxUnknownChunk bounds a peer's reply when the chunk's size is not known
// (no manifest): no chunk is larger (the design's chunks are 16-64 MiB).
const maxUnknownChunk = 1 << 30

type fetched struct {
	data []byte
	src  Source
}

// Fetch returns a whole chunk from the first source that has it, in the
// package doc's order, verified; a chunk from elsewhere is kept in Local
// and announced to the Directory. Concurrent Fetches of one chunk on a
// node share one flight. The slice may be shared with other callers: do
// not modify it. A failing peer is never an error; the error comes only
// when S3, the last source, fails too, and wraps ErrNoSource.
func (p *Peer) Fetch(ctx context.Context, ref objstore.ChunkRef) ([]byte, Source, error) {
	lc := &p.src[SourceLocal]
	lc.requests.Add(1)
	if b, _, _, ok := p.cfg.Local.ReadChunk(ref, 0, -1); ok {
		lc.hits.Add(1)
		lc.bytes.Add(int64(len(b)))
		return b, SourceLocal, nil
	}
	// The flight outlives a caller that gives up: the others waiting on
	// it, and the pool, still want the chunk.
	ch := p.flights.DoChan("fetch "+ref.String(), func() (any, error) {
		return p.fetch(context.WithoutCancel(ctx), ref)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, 0, r.Err
		}
		f := r.Val.(fetched)
		return f.data, f.src, nil
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}

func (p *Peer) fetch(ctx context.Context, ref objstore.ChunkRef) (fetched, error) {
	// Stored by a flight that ended since the caller looked.
	if b, _, _, ok := p.cfg.Local.ReadChunk(ref, 0, -1); ok {
		lc := &p.src[SourceLocal]
		lc.hits.Add(1)
		lc.bytes.Add(int64(len(b)))
		return fetched{b, SourceLocal}, nil
	}
	var want *ChunkInfo
	info, err := p.catalog.Chunk(ctx, ref)
	switch {
	case err == nil:
		want = &info
	case definitive(err):
		return fetched{}, fmt.Errorf("%s: %w", ref, err)
	}
	// Without the manifest (S3 down and it is not cached) peers are still
	// asked: their chunks are checked against the CRC-32C they send.
	if holders, err := p.cfg.Dir.Holders(ctx, ref); err == nil {
		rand.Shuffle(len(holders), func(i, j int) { holders[i], holders[j] = holders[j], holders[i] })
		for _, n := range holders {
			if n.ID == p.cfg.Self {
				continue
			}
			if b, crc, ok := p.fromPeer(ctx, n, ref, want, false, SourcePeer); ok {
				p.keep(ctx, ref, b, crc)
				return fetched{b, SourcePeer}, nil
			}
		}
	}
	// The home node fills from S3 once for everyone; when this node is
	// the home, its own fill below is that one fill.
	if home, ok := Home(HashKey(ref), p.cfg.Dir.LiveNodes()); ok && home.ID != p.cfg.Self {
		if b, crc, ok := p.fromPeer(ctx, home, ref, want, true, SourceHome); ok {
			p.keep(ctx, ref, b, crc)
			return fetched{b, SourceHome}, nil
		}
	}
	b, _, err := p.fill(ctx, ref)
	if err != nil {
		return fetched{}, fmt.Errorf("%w: %s: %w", ErrNoSource, ref, err)
	}
	return fetched{b, SourceS3}, nil
}

// definitive tells a catalog error that no source can help with (no such
// chunk, version or file) from one of reaching S3 for the manifest, when
// peers may still have the chunk.
func definitive(err error) bool {
	return errors.Is(err, ErrNoChunk) || errors.Is(err, ErrNotInCatalog) ||
		errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrBadManifest)
}

// fill returns a chunk from Local or, failing that, from S3 (then kept and
// announced), in one flight per chunk for this node's own Fetches and the
// ?fill=1 requests it serves alike.
func (p *Peer) fill(ctx context.Context, ref objstore.ChunkRef) ([]byte, objstore.CRC32C, error) {
	v, err, _ := p.flights.Do("fill "+ref.String(), func() (any, error) {
		if b, _, crc, ok := p.cfg.Local.ReadChunk(ref, 0, -1); ok {
			return fetchedCRC{b, crc}, nil
		}
		info, err := p.catalog.Chunk(ctx, ref)
		if err != nil {
			return nil, err
		}
		store := info.Store
		if store == nil {
			store = p.cfg.Store
		}
		if store == nil {
			return nil, ErrNoStore
		}
		c := &p.src[SourceS3]
		c.requests.Add(1)
		b, err := store.GetRange(ctx, info.Key, info.Off, info.Size)
		if err != nil {
			return nil, err
		}
		crc := objstore.Checksum(b)
		if info.HaveCRC && crc != info.CRC32C {
			p.badCRC.Add(1)
			return nil, fmt.Errorf("%w: %s from S3 %s: crc32c %s, manifest %s", ErrBadChunk, ref, info.Key, crc, info.CRC32C)
		}
		c.hits.Add(1)
		c.bytes.Add(int64(len(b)))
		p.keep(ctx, ref, b, crc)
		return fetchedCRC{b, crc}, nil
	})
	if err != nil {
		return nil, 0, err
	}
	f := v.(fetchedCRC)
	return f.data, f.crc, nil
}

type fetchedCRC struct {
	data []byte
	crc  objstore.CRC32C
}

// keep stores a verified chunk and announces it; neither failing makes
// the chunk less good for the reader, so both are only counted.
func (p *Peer) keep(ctx context.Context, ref objstore.ChunkRef, b []byte, crc objstore.CRC32C) {
	if err := p.cfg.Local.StoreChunk(ref, b, crc); err != nil {
		p.storeErrors.Add(1)
		return
	}
	if err := p.cfg.Dir.AddHolding(ctx, ref); err != nil {
		p.holdErrors.Add(1)
	}
}

// chunkPath is a chunk's path in the protocol.
func chunkPath(ref objstore.ChunkRef) string {
	return fmt.Sprintf("%s%s/%d/%d", chunkPrefix, ref.File, ref.Ver, ref.Idx)
}

// fromPeer asks node n for the whole chunk; ok only for a chunk that
// checks (against want when known, and always against the CRC-32C the
// peer sends).
func (p *Peer) fromPeer(ctx context.Context, n Node, ref objstore.ChunkRef, want *ChunkInfo, fill bool, src Source) ([]byte, objstore.CRC32C, bool) {
	if p.isSuspect(n.ID) {
		p.skipped.Add(1)
		return nil, 0, false
	}
	b, crc, status := p.getPeer(ctx, n, ref, want, fill, src)
	if status != peerOK && status != peerMissing {
		p.markSuspect(n.ID)
	}
	return b, crc, status == peerOK
}

// The outcomes of a request to a peer.
type peerStatus int

const (
	peerOK      peerStatus = iota
	peerMissing            // 404 or 502: it does not have the chunk, nothing wrong with it
	peerFailed             // anything else
)

func (p *Peer) isSuspect(id NodeID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.suspect[id]
	if ok && time.Now().After(until) {
		delete(p.suspect, id)
		return false
	}
	return ok
}

func (p *Peer) markSuspect(id NodeID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.suspect[id] = time.Now().Add(p.suspectFor)
}

func (p *Peer) getPeer(ctx context.Context, n Node, ref objstore.ChunkRef, want *ChunkInfo, fill bool, src Source) ([]byte, objstore.CRC32C, peerStatus) {
	c := &p.src[src]
	c.requests.Add(1)
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	url := n.URL + chunkPath(ref)
	if fill {
		url += "?fill=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, peerFailed
	}
	req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, 0, peerFailed // refused, reset, TLS, timeout: the next source
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096)) // keep the connection reusable
		switch resp.StatusCode {
		case http.StatusNotFound, http.StatusBadGateway:
			// Not held, or a home node whose S3 fill failed: the node is
			// fine, and may hold other chunks (S3 down: the peers are
			// all there is).
			return nil, 0, peerMissing
		case http.StatusUnauthorized:
			p.unauthorized.Add(1)
		}
		return nil, 0, peerFailed
	}
	sent, err := objstore.ParseCRC32C(resp.Header.Get(CRCHeader))
	if err != nil {
		p.badCRC.Add(1)
		return nil, 0, peerFailed
	}
	limit := int64(maxUnknownChunk)
	if want != nil {
		limit = want.Size
	}
	var b []byte
	if cl := resp.ContentLength; cl >= 0 && cl <= limit {
		// One buffer of the announced size, read straight into: no
		// growing and copying for a 64 MiB chunk.
		b = make([]byte, cl)
		_, err = io.ReadFull(resp.Body, b)
	} else {
		b, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	}
	if err != nil {
		return nil, 0, peerFailed // the peer died mid-chunk
	}
	crc := objstore.Checksum(b)
	if int64(len(b)) > limit || crc != sent ||
		want != nil && (int64(len(b)) != want.Size || want.HaveCRC && crc != want.CRC32C) {
		p.badCRC.Add(1)
		return nil, 0, peerFailed
	}
	c.hits.Add(1)
	c.bytes.Add(int64(len(b)))
	return b, crc, peerOK
}
