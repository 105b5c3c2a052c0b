// Package pattern is the self-identifying data layout of the lockload
// tests: every 4 KiB chunk of a request carries a header naming the request
// that wrote it (writer, sequence number, the unit range it covered, the
// chunk's own index in the file) and a CRC32 of the whole chunk; the rest is
// a payload derived from (writer, seq, chunk), so a chunk is either exactly
// what one request wrote there or detectably wrong.
//
// Requests always cover whole 64 KiB units (64 KiB aligned, 1 or 2 units),
// and readers read whole units, so under correct range locking one pread
// never sees two different requests inside one unit.
package pattern

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

const (
	ChunkSize     = 4 << 10
	UnitSize      = 64 << 10
	ChunksPerUnit = UnitSize / ChunkSize

	magic      = 0x4c4e4e44 // "DNNL"
	headerSize = 32
	crcOff     = 24
)

// Header identifies the request that wrote a chunk.
type Header struct {
	Writer   uint32 // 0: the initial fill
	Seq      uint32 // the writer's request number
	Chunk    uint32 // index of the chunk in the file
	ReqUnit  uint32 // first unit of the request
	ReqUnits uint32 // units the request covered
}

// Req is a request's identity, for comparing chunks and units.
type Req struct{ Writer, Seq, ReqUnit, ReqUnits uint32 }

func (h Header) Req() Req { return Req{h.Writer, h.Seq, h.ReqUnit, h.ReqUnits} }

func (r Req) String() string {
	return fmt.Sprintf("(writer %d, seq %d, units [%d,%d))", r.Writer, r.Seq, r.ReqUnit, r.ReqUnit+r.ReqUnits)
}

// payload fills p from (writer, seq, chunk) with splitmix64.
func payload(p []byte, writer, seq, chunk uint32) {
	x := uint64(writer)<<44 ^ uint64(seq)<<20 ^ uint64(chunk) ^ 0x9e3779b97f4a7c15
	for i := 0; i+8 <= len(p); i += 8 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(p[i:], z^z>>31)
	}
}

func checksum(c []byte) uint32 {
	crc := crc32.ChecksumIEEE(c[:crcOff])
	return crc32.Update(crc, crc32.IEEETable, c[crcOff+4:])
}

// FillChunk writes chunk h into c (ChunkSize bytes).
func FillChunk(c []byte, h Header) {
	c = c[:ChunkSize]
	binary.LittleEndian.PutUint32(c[0:], magic)
	binary.LittleEndian.PutUint32(c[4:], h.Writer)
	binary.LittleEndian.PutUint32(c[8:], h.Seq)
	binary.LittleEndian.PutUint32(c[12:], h.Chunk)
	binary.LittleEndian.PutUint32(c[16:], h.ReqUnit)
	binary.LittleEndian.PutUint32(c[20:], h.ReqUnits)
	binary.LittleEndian.PutUint32(c[28:], 0)
	payload(c[headerSize:], h.Writer, h.Seq, h.Chunk)
	binary.LittleEndian.PutUint32(c[crcOff:], checksum(c))
}

// FillRequest fills buf (units*UnitSize bytes) with the request
// (writer, seq) covering units [unit, unit+units).
func FillRequest(buf []byte, writer, seq, unit, units uint32) {
	for i := uint32(0); i < units*ChunksPerUnit; i++ {
		FillChunk(buf[i*ChunkSize:], Header{Writer: writer, Seq: seq, Chunk: unit*ChunksPerUnit + i, ReqUnit: unit, ReqUnits: units})
	}
}

// CheckChunk verifies that c is an intact chunk written at chunk index
// chunk, and returns its header.
func CheckChunk(c []byte, chunk uint32) (Header, error) {
	c = c[:ChunkSize]
	h := Header{
		Writer:   binary.LittleEndian.Uint32(c[4:]),
		Seq:      binary.LittleEndian.Uint32(c[8:]),
		Chunk:    binary.LittleEndian.Uint32(c[12:]),
		ReqUnit:  binary.LittleEndian.Uint32(c[16:]),
		ReqUnits: binary.LittleEndian.Uint32(c[20:]),
	}
	if m := binary.LittleEndian.Uint32(c[0:]); m != magic {
		return h, fmt.Errorf("chunk %d: bad magic %#x (first bytes % x)", chunk, m, c[:16])
	}
	if got, want := binary.LittleEndian.Uint32(c[crcOff:]), checksum(c); got != want {
		return h, fmt.Errorf("chunk %d: CRC %#x, computed %#x: torn or corrupt chunk (header says %s chunk %d)", chunk, got, want, h.Req(), h.Chunk)
	}
	if h.Chunk != chunk {
		return h, fmt.Errorf("chunk %d holds chunk %d of %s: misplaced data", chunk, h.Chunk, h.Req())
	}
	if unit := chunk / ChunksPerUnit; unit < h.ReqUnit || unit >= h.ReqUnit+h.ReqUnits {
		return h, fmt.Errorf("chunk %d (unit %d) claims request %s, which does not cover it", chunk, unit, h.Req())
	}
	var want [ChunkSize - headerSize]byte
	payload(want[:], h.Writer, h.Seq, h.Chunk)
	if !bytes.Equal(c[headerSize:], want[:]) {
		return h, fmt.Errorf("chunk %d: payload does not match its header %s", chunk, h.Req())
	}
	return h, nil
}

// CheckUnit verifies that u (UnitSize bytes, read in one pread at unit
// index unit) is entirely the work of one request, and returns it.
func CheckUnit(u []byte, unit uint32) (Req, error) {
	var first Req
	for i := uint32(0); i < ChunksPerUnit; i++ {
		h, err := CheckChunk(u[i*ChunkSize:], unit*ChunksPerUnit+i)
		if err != nil {
			return first, err
		}
		if i == 0 {
			first = h.Req()
		} else if h.Req() != first {
			return first, fmt.Errorf("unit %d is torn: chunk 0 from %s, chunk %d from %s\n%s", unit, first, i, h.Req(), DescribeUnit(u, unit))
		}
	}
	return first, nil
}

// DescribeUnit lists the request of each chunk of u, for failure messages.
func DescribeUnit(u []byte, unit uint32) string {
	var b bytes.Buffer
	for i := uint32(0); i < ChunksPerUnit; i++ {
		h, err := CheckChunk(u[i*ChunkSize:], unit*ChunksPerUnit+i)
		if err != nil {
			fmt.Fprintf(&b, "  chunk %2d: %v\n", i, err)
		} else {
			fmt.Fprintf(&b, "  chunk %2d: %s\n", i, h.Req())
		}
	}
	return b.String()
}
