package cluster

import (
	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
)

// local is peer.Local on the pool (DESIGN §Cluster, "Reading"): chunks
// of the pool files, then the memory cache of chunks filled for others.
type local struct{ n *Node }

func (l local) ReadChunk(ref objstore.ChunkRef, off, length int64) ([]byte, int64, objstore.CRC32C, bool) {
	n := l.n
	release, ok := n.usePool()
	if !ok {
		return nil, 0, 0, false // not started, or closing
	}
	defer release()
	n.mu.Lock()
	f := n.byID[namespace.FileID(ref.File)]
	n.mu.Unlock()
	if f != nil {
		if b, size, crc, ok := n.readFileChunk(f, ref, off, length); ok {
			return b, size, crc, true
		}
	}
	e, ok := n.cache.get(ref)
	if !ok {
		return nil, 0, 0, false
	}
	size := int64(len(e.data))
	off = min(max(off, 0), size)
	end := size
	if length >= 0 {
		end = min(off+length, size)
	}
	return e.data[off:end], size, e.crc, true
}

// readFileChunk reads a chunk from the pool file when it holds exactly that
// version's chunk. The copy is made without f.mu held (reads and stores of
// other chunks go on); a reset of the file meanwhile makes it not ok.
func (n *Node) readFileChunk(f *file, ref objstore.ChunkRef, off, length int64) ([]byte, int64, objstore.CRC32C, bool) {
	i := namespace.ChunkIdx(ref.Idx)
	f.mu.Lock()
	if objstore.Version(f.ver) != ref.Ver || !f.present.Has(i) || f.changed.Has(i) || f.inflight.Has(i) || f.removed {
		f.mu.Unlock()
		return nil, 0, 0, false
	}
	fsize := int64(f.in.Attr().Size)
	start := int64(ref.Idx) * f.cs
	size := min(f.cs, fsize-start)
	crc, haveCRC := f.crc[i]
	f.mu.Unlock()
	if size <= 0 {
		return nil, 0, 0, false
	}
	off = min(max(off, 0), size)
	end := size
	if length >= 0 {
		end = min(off+length, size)
	}
	var b []byte
	if !haveCRC {
		// The checksum needs the whole chunk: the range is served from
		// that copy rather than read a second time.
		whole := make([]byte, size)
		if k, err := n.p.ReadAt(f.in, whole, start); err != nil || int64(k) != size {
			return nil, 0, 0, false
		}
		crc = objstore.Checksum(whole)
		b = whole[off:end]
	} else {
		b = make([]byte, end-off)
		if k, err := n.p.ReadAt(f.in, b, start+off); err != nil || k != len(b) {
			return nil, 0, 0, false
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if objstore.Version(f.ver) != ref.Ver || !f.present.Has(i) || f.changed.Has(i) || f.inflight.Has(i) || f.removed {
		return nil, 0, 0, false // reset or written while it was read
	}
	if !haveCRC {
		f.crc[i] = crc
	}
	n.used(f, i) // served: as recently used as a local read (evict.go)
	return b, size, crc, true
}

func (l local) StoreChunk(ref objstore.ChunkRef, data []byte, crc objstore.CRC32C) error {
	n := l.n
	n.mu.Lock()
	f := n.byID[namespace.FileID(ref.File)]
	n.mu.Unlock()
	if f != nil && n.storeInFile(f, ref, data, func() objstore.CRC32C { return crc }) == nil {
		return nil
	}
	for _, gone := range n.cache.put(ref, data, crc) {
		n.ns.RemoveHolding(namespace.FileID(gone.File), namespace.Version(gone.Ver), namespace.ChunkIdx(gone.Idx))
	}
	return nil
}
