package peer

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/dnnfs/dnnfs/cluster/objstore"
)

// chunkPrefix is the one path prefix served.
const chunkPrefix = "/v1/chunks/"

// CRCHeader carries the CRC-32C of the whole chunk (8 hex digits) on 200
// and 206 replies.
const CRCHeader = "X-Dnnfs-Crc32c"

// ServeHTTP serves this node's chunks to its peers (the package doc's
// table): the token first, so nothing about the namespace shows without
// it, then the one path form, then the chunk from Local, or with ?fill=1
// from S3 through this node's fill flight.
func (p *Peer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !p.tokenOK(tok) {
		p.servedDenied.Add(1)
		w.Header().Set("WWW-Authenticate", `Bearer realm="dnnfs"`)
		http.Error(w, "missing or wrong cluster token", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	}
	// The raw path: no cleaning, no unescaping, so "..", "%2e" and "//"
	// cannot reach anything but the parser, which refuses them.
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), chunkPrefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	ref, err := ParseChunkPath(rest)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fill := false
	switch r.URL.RawQuery {
	case "":
	case "fill=1":
		fill = true
	default:
		http.Error(w, "the only query is fill=1", http.StatusBadRequest)
		return
	}
	rng, err := parseRange(r.Header.Get("Range"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}

	var data []byte
	var size int64
	var crc objstore.CRC32C
	off, n := rng.start, rng.n()
	if rng.suffix > 0 {
		off, n = 0, 0 // the size first
	}
	data, size, crc, ok = p.cfg.Local.ReadChunk(ref, off, n)
	if ok && rng.suffix > 0 {
		off, n = max(size-rng.suffix, 0), -1
		data, size, crc, ok = p.cfg.Local.ReadChunk(ref, off, n)
	}
	if !ok {
		if !fill {
			p.servedMiss.Add(1)
			http.Error(w, "chunk not held here", http.StatusNotFound)
			return
		}
		p.fills.Add(1)
		whole, c, err := p.fill(context.WithoutCancel(r.Context()), ref)
		if err != nil {
			http.Error(w, "fill from S3: "+oneLine(err), http.StatusBadGateway)
			return
		}
		size, crc = int64(len(whole)), c
		if rng.suffix > 0 {
			off = max(size-rng.suffix, 0)
		}
		data = nil
		if off < size {
			end := size
			if rng.end >= 0 && rng.suffix == 0 {
				end = min(rng.end+1, size)
			}
			data = whole[off:end]
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Accept-Ranges", "bytes")
	h.Set(CRCHeader, crc.String())
	status := http.StatusOK
	if rng.set {
		if off >= size {
			h.Del(CRCHeader)
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			http.Error(w, "range past the chunk's end", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		status = http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+int64(len(data))-1, size))
	}
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	if _, err := w.Write(data); err == nil {
		p.served.Add(1)
		p.servedBytes.Add(int64(len(data)))
	}
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// ParseChunkPath reads "<id>/<ver>/<chunk>" (the part after /v1/chunks/):
// 32 lower-case hex digits, a version 1 up and a chunk index, both in
// canonical decimal (no sign, no leading zeros), nothing else.
func ParseChunkPath(s string) (objstore.ChunkRef, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return objstore.ChunkRef{}, ErrBadChunkPath
	}
	id, err := objstore.ParseFileID(parts[0])
	if err != nil {
		return objstore.ChunkRef{}, ErrBadChunkPath
	}
	ver, ok := canonicalUint(parts[1], 64)
	if !ok || ver == 0 {
		return objstore.ChunkRef{}, ErrBadChunkPath
	}
	idx, ok := canonicalUint(parts[2], 32)
	if !ok {
		return objstore.ChunkRef{}, ErrBadChunkPath
	}
	return objstore.ChunkRef{File: id, Ver: objstore.Version(ver), Idx: objstore.ChunkIdx(idx)}, nil
}

func canonicalUint(s string, bits int) (uint64, bool) {
	v, err := strconv.ParseUint(s, 10, bits)
	return v, err == nil && strconv.FormatUint(v, 10) == s
}

// byteRange is a parsed Range header: none, "a-b", "a-" (end -1) or "-n"
// (suffix n).
type byteRange struct {
	set        bool
	start, end int64
	suffix     int64
}

// n is the length to read for a start-based range (-1: to the end).
func (r byteRange) n() int64 {
	if !r.set || r.end < 0 {
		return -1
	}
	return r.end - r.start + 1
}

func parseRange(h string) (byteRange, error) {
	if h == "" {
		return byteRange{end: -1}, nil
	}
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return byteRange{}, ErrBadRange
	}
	a, b, ok := strings.Cut(spec, "-")
	if !ok {
		return byteRange{}, ErrBadRange
	}
	r := byteRange{set: true, end: -1}
	if a == "" {
		n, ok := canonicalUint(b, 63)
		if !ok || n == 0 {
			return byteRange{}, ErrBadRange
		}
		r.suffix = int64(n)
		return r, nil
	}
	start, ok := canonicalUint(a, 63)
	if !ok {
		return byteRange{}, ErrBadRange
	}
	r.start = int64(start)
	if b != "" {
		end, ok := canonicalUint(b, 63)
		if !ok || end < start {
			return byteRange{}, ErrBadRange
		}
		r.end = int64(end)
	}
	return r, nil
}
