package format

import "fmt"

// TableBlk returns the table descriptor block of a table inode.
func (in *Inode) TableBlk() Blk { return Blk(le.Uint64(in.Session[INTable-INSession:])) }

// SetTableBlk sets the table descriptor block.
func (in *Inode) SetTableBlk(b Blk) { le.PutUint64(in.Session[INTable-INSession:], uint64(b)) }

// DtypeSize returns the bytes per value of dt, 0 if dt is unknown.
func DtypeSize(dt uint8) int {
	switch dt {
	case DtypeF32:
		return 4
	case DtypeF16, DtypeBF16:
		return 2
	}
	return 0
}

// TableHeader is a decoded descriptor header.
type TableHeader struct {
	Rows      uint64
	Dim       uint32
	Dtype     uint8
	ShardRows uint64
	Shards    uint32
	Blocks    uint32
}

// RowBytes is the size of one row.
func (h *TableHeader) RowBytes() uint64 { return uint64(h.Dim) * uint64(DtypeSize(h.Dtype)) }

// Size is the table's file size: Rows * RowBytes.
func (h *TableHeader) Size() uint64 { return h.Rows * h.RowBytes() }

// ShardRange returns the rows [first, end) of shard i.
func (h *TableHeader) ShardRange(i int) (first, end uint64) {
	first = uint64(i) * h.ShardRows
	return first, min(first+h.ShardRows, h.Rows)
}

// ShardSpan is the bytes a shard occupies on a device: its rows rounded
// up to whole blocks, so every shard starts block aligned (O_DIRECT).
func (h *TableHeader) ShardSpan(i int) uint64 {
	a, b := h.ShardRange(i)
	return ((b-a)*h.RowBytes() + BlockSize - 1) / BlockSize * BlockSize
}

// TableBlocks returns the descriptor size for n shards.
func TableBlocks(n int) uint32 {
	return uint32((TBHeader + n*ShardEntrySize + BlockSize - 1) / BlockSize)
}

// NewTableHeader validates a table's shape and fills in the shard count
// and descriptor size.
func NewTableHeader(rows uint64, dim uint32, dtype uint8, shardRows uint64) (TableHeader, error) {
	h := TableHeader{Rows: rows, Dim: dim, Dtype: dtype, ShardRows: shardRows}
	switch {
	case DtypeSize(dtype) == 0:
		return h, fmt.Errorf("dtype %d: want f32, f16 or bf16", dtype)
	case rows < 1 || rows > MaxTableRows:
		return h, fmt.Errorf("rows %d: want 1 .. 2^40", rows)
	case dim < 1 || dim > MaxTableDim:
		return h, fmt.Errorf("dim %d: want 1 .. 65536", dim)
	case h.Size() > MaxTableBytes:
		return h, fmt.Errorf("%d rows of %d bytes exceed the 2^50-byte table limit (MaxTableBytes)", rows, h.RowBytes())
	case shardRows < 1:
		return h, fmt.Errorf("shard rows %d", shardRows)
	}
	n := (rows + shardRows - 1) / shardRows
	if n > MaxTableShards {
		return h, fmt.Errorf("%d shards: more than %d", n, MaxTableShards)
	}
	h.Shards = uint32(n)
	h.Blocks = TableBlocks(int(n))
	return h, nil
}

// Encode writes the header (TBHeader bytes) with its checksum.
func (h *TableHeader) Encode(b []byte) {
	b = b[:TBHeader]
	clear(b)
	le.PutUint32(b[TBMagic:], TableMagic)
	le.PutUint64(b[TBRows:], h.Rows)
	le.PutUint32(b[TBDim:], h.Dim)
	b[TBDtype] = h.Dtype
	le.PutUint64(b[TBShardRows:], h.ShardRows)
	le.PutUint32(b[TBShards:], h.Shards)
	le.PutUint32(b[TBBlocks:], h.Blocks)
	le.PutUint32(b[TBCRC:], Checksum(b[4:TBHeader]))
}

// DecodeTableHeader parses and validates a descriptor header.
func DecodeTableHeader(b []byte) (TableHeader, error) {
	var h TableHeader
	if len(b) < TBHeader {
		return h, fmt.Errorf("table descriptor: %w: short buffer", corrupt)
	}
	if got, want := le.Uint32(b[TBCRC:]), Checksum(b[4:TBHeader]); got != want {
		return h, fmt.Errorf("table descriptor: %w (stored %08x, computed %08x)", badChecksum, got, want)
	}
	if le.Uint32(b[TBMagic:]) != TableMagic {
		return h, fmt.Errorf("table descriptor: %w: bad magic", corrupt)
	}
	want, err := NewTableHeader(le.Uint64(b[TBRows:]), le.Uint32(b[TBDim:]), b[TBDtype], le.Uint64(b[TBShardRows:]))
	if err != nil {
		return h, fmt.Errorf("table descriptor: %w: %v", corrupt, err)
	}
	h = want
	h.Shards, h.Blocks = le.Uint32(b[TBShards:]), le.Uint32(b[TBBlocks:])
	if h != want {
		return h, fmt.Errorf("table descriptor: %w: %d shards in %d blocks, want %d in %d", corrupt, h.Shards, h.Blocks, want.Shards, want.Blocks)
	}
	return h, nil
}

// ShardEntry is one translation-table entry.
type ShardEntry struct {
	Dev  DevID
	RDev DevID
	Gen  uint32
	Off  uint64
	ROff uint64
}

// Encode writes the entry (ShardEntrySize bytes) with its checksum.
func (e *ShardEntry) Encode(b []byte) {
	b = b[:ShardEntrySize]
	clear(b)
	le.PutUint16(b[SEDev:], uint16(e.Dev))
	le.PutUint16(b[SERDev:], uint16(e.RDev))
	le.PutUint32(b[SEGen:], e.Gen)
	le.PutUint64(b[SEOff:], e.Off)
	le.PutUint64(b[SEROff:], e.ROff)
	le.PutUint32(b[SECRC:], Checksum(b[:SECRC]))
}

// DecodeShardEntry parses and validates an entry (device ids against the
// registry size ndev).
func DecodeShardEntry(b []byte, ndev int) (ShardEntry, error) {
	var e ShardEntry
	if len(b) < ShardEntrySize {
		return e, fmt.Errorf("shard entry: %w: short buffer", corrupt)
	}
	if got, want := le.Uint32(b[SECRC:]), Checksum(b[:SECRC]); got != want {
		return e, fmt.Errorf("shard entry: %w (stored %08x, computed %08x)", badChecksum, got, want)
	}
	e.Dev, e.RDev = DevID(le.Uint16(b[SEDev:])), DevID(le.Uint16(b[SERDev:]))
	e.Gen = le.Uint32(b[SEGen:])
	e.Off, e.ROff = le.Uint64(b[SEOff:]), le.Uint64(b[SEROff:])
	switch {
	case e.Dev < 1 || int(e.Dev) > ndev:
		return e, fmt.Errorf("shard entry: %w: device %d (%d registered)", corrupt, e.Dev, ndev)
	case e.Off < DevDataStart || e.Off%BlockSize != 0 || e.Off > MaxTableBytes:
		return e, fmt.Errorf("shard entry: %w: offset %d", corrupt, e.Off)
	case e.RDev == 0 && e.ROff != 0:
		return e, fmt.Errorf("shard entry: %w: replica offset %d without a device", corrupt, e.ROff)
	case e.RDev != 0 && (int(e.RDev) > ndev || e.RDev == e.Dev || e.ROff < DevDataStart || e.ROff%BlockSize != 0 || e.ROff > MaxTableBytes):
		return e, fmt.Errorf("shard entry: %w: replica on device %d at %d", corrupt, e.RDev, e.ROff)
	}
	return e, nil
}
