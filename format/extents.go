package format

import (
	"fmt"
	"sort"
)

// MaxFileSize is the largest file size, the kernel's MAX_LFS_FILESIZE
// (2^63-1 bytes), as on the kernel's local file systems: a byte offset
// fits an int64 (loff_t) and one past the last byte still does.
const MaxFileSize = 1<<63 - 1

// MaxFileBlocks bounds a file's block numbers: blocks 0 .. MaxFileBlocks-1
// hold bytes 0 .. MaxFileSize-1 (the last is (2^63-1)/4096), and no
// extent ends past it, so an extent's End and End*BlockSize (at most 2^63)
// never overflow a uint64. An extent past it is corrupt.
const MaxFileBlocks = (MaxFileSize-1)/BlockSize + 1

// Extent maps Len blocks of a file starting at file block Logical to pool
// blocks starting at Phys.
type Extent struct {
	Logical uint64
	Phys    Blk
	Len     uint64
	// Unwritten: allocated by fallocate and not written since. Its blocks
	// are zeroed, so it reads as zeros; SEEK_DATA/SEEK_HOLE see a hole, as
	// on ext4 and tmpfs. On media: bit 63 of len (ExtentUnwritten).
	Unwritten bool
}

// End is the first file block after the extent.
func (e Extent) End() uint64 { return e.Logical + e.Len }

func encodeExtent(b []byte, e Extent) {
	le.PutUint64(b[EXLogical:], e.Logical)
	le.PutUint64(b[EXPhys:], uint64(e.Phys))
	l := e.Len
	if e.Unwritten {
		l |= ExtentUnwritten
	}
	le.PutUint64(b[EXLen:], l)
}

func decodeExtent(b []byte) Extent {
	l := le.Uint64(b[EXLen:])
	return Extent{Logical: le.Uint64(b[EXLogical:]), Phys: Blk(le.Uint64(b[EXPhys:])), Len: l &^ ExtentUnwritten,
		Unwritten: l&ExtentUnwritten != 0}
}

// EncodeOverflow fills a block with up to OverflowSlot extents.
func EncodeOverflow(b []byte, exts []Extent, next Blk) {
	b = b[:BlockSize]
	clear(b)
	le.PutUint32(b[OVCount:], uint32(len(exts)))
	le.PutUint64(b[OVNext:], uint64(next))
	for i, e := range exts {
		encodeExtent(b[OVExtents+i*ExtentSize:], e)
	}
	le.PutUint32(b[OVCRC:], Checksum(b[4:]))
}

// DecodeOverflow parses an overflow block.
func DecodeOverflow(b []byte) (exts []Extent, next Blk, err error) {
	if len(b) < BlockSize {
		return nil, 0, fmt.Errorf("extent block: %w: short buffer", corrupt)
	}
	if got, want := le.Uint32(b[OVCRC:]), Checksum(b[4:BlockSize]); got != want {
		return nil, 0, fmt.Errorf("extent block: %w (stored %08x, computed %08x)", badChecksum, got, want)
	}
	n := le.Uint32(b[OVCount:])
	if n > OverflowSlot {
		return nil, 0, fmt.Errorf("extent block: %w: %d extents", corrupt, n)
	}
	exts = make([]Extent, n)
	for i := range exts {
		exts[i] = decodeExtent(b[OVExtents+i*ExtentSize:])
	}
	return exts, Blk(le.Uint64(b[OVNext:])), nil
}

// An inode's extent list (FORMAT.md "Inode", "Extent overflow block"):
// the first InlineExtents extents live in the inode, the rest in a chain
// of overflow blocks of OverflowSlot extents each, starting at
// Inode.Overflow; Inode.Extents counts them all.

// OverflowBlocks is how many overflow blocks a list of n extents needs.
func OverflowBlocks(n int) int {
	if n <= InlineExtents {
		return 0
	}
	return (n - InlineExtents + OverflowSlot - 1) / OverflowSlot
}

// EncodeExtents stores exts into d (count, inline part, first overflow
// block) and calls put with the encoded bytes of each overflow block, in
// chain order. ovf are the chain's blocks; len(ovf) must be
// OverflowBlocks(len(exts)). The bytes passed to put are reused between
// calls.
func EncodeExtents(d *Inode, exts []Extent, ovf []Blk, put func(b Blk, block []byte)) {
	if len(ovf) != OverflowBlocks(len(exts)) {
		panic(fmt.Sprintf("format.EncodeExtents: %d overflow blocks for %d extents", len(ovf), len(exts)))
	}
	d.Extents = uint32(len(exts))
	d.Inline = [InlineExtents]Extent{}
	copy(d.Inline[:], exts)
	d.Overflow = 0
	if len(ovf) > 0 {
		d.Overflow = ovf[0]
	}
	var rest []Extent
	if len(exts) > InlineExtents {
		rest = exts[InlineExtents:]
	}
	buf := make([]byte, BlockSize)
	for i, b := range ovf {
		chunk := rest[i*OverflowSlot : min(len(rest), (i+1)*OverflowSlot)]
		var next Blk
		if i+1 < len(ovf) {
			next = ovf[i+1]
		}
		EncodeOverflow(buf, chunk, next)
		put(b, buf)
	}
}

// damageError is a damaged structure found by a reader that follows
// pointers (extent lists, xattr regions). Its text says what is wrong in
// words a checker shows as is; it wraps err (ErrCorrupt when nil).
type damageError struct {
	why string
	err error
}

func damaged(err error, f string, args ...any) error {
	if err == nil {
		err = ErrCorrupt
	}
	return &damageError{fmt.Sprintf(f, args...), err}
}

func (e *damageError) Error() string { return e.why }
func (e *damageError) Unwrap() error { return e.err }

// DecodeExtents collects d's extent list: the inline part and the overflow
// chain, whose blocks read returns (BlockSize bytes). It checks what makes
// a list usable: every overflow block and extent inside the data region
// (valid), no chain loop or chain longer than the count needs, the count
// matched, extents non-empty, below MaxFileBlocks, sorted and disjoint. It
// does not check who else owns the blocks. ovf is the chain, also on
// error (as far as it was read). Errors wrap ErrCorrupt.
func DecodeExtents(d *Inode, valid func(b Blk, n uint64) bool, read func(b Blk) []byte) (exts []Extent, ovf []Blk, err error) {
	bad := func(f string, args ...any) ([]Extent, []Blk, error) {
		return nil, ovf, damaged(nil, f, args...)
	}
	n := uint64(d.Extents)
	exts = append([]Extent(nil), d.Inline[:min(n, InlineExtents)]...)
	seen := map[Blk]bool{}
	limit := n/OverflowSlot + 2
	for blk := d.Overflow; blk != 0; {
		switch {
		case uint64(len(ovf)) >= limit:
			return bad("extent overflow chain is longer than %d extents need", n)
		case !valid(blk, 1):
			return bad("extent overflow block %d lies outside the data region", blk)
		case seen[blk]:
			return bad("extent overflow chain loops back to block %d", blk)
		}
		seen[blk] = true
		ovf = append(ovf, blk)
		more, next, err := DecodeOverflow(read(blk))
		if err != nil {
			return bad("extent overflow block %d: %s", blk, trimPrefix(err.Error(), "extent block: "))
		}
		if uint64(len(exts)+len(more)) > n {
			return bad("extent overflow chain holds more than the %d extents the count says", n)
		}
		exts = append(exts, more...)
		blk = next
	}
	if uint64(len(exts)) != n {
		return bad("%d extents stored, the count says %d", len(exts), n)
	}
	var prevEnd uint64
	for i, e := range exts {
		where := fmt.Sprintf("extent %d {file block %d, pool block %d, %d blocks}", i, e.Logical, e.Phys, e.Len)
		switch {
		case e.Len == 0:
			return bad("%s is empty", where)
		case e.Logical > MaxFileBlocks || e.Len > MaxFileBlocks-e.Logical:
			return bad("%s lies past the largest file size", where)
		case !valid(e.Phys, e.Len):
			return bad("%s lies outside the data region", where)
		case i > 0 && e.Logical < prevEnd:
			return bad("%s is out of order or overlaps the previous extent", where)
		}
		prevEnd = e.End()
	}
	return exts, ovf, nil
}

func trimPrefix(s, p string) string {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// MapBlock maps file block fb through exts (sorted by Logical, disjoint):
// ok with the pool block and how many blocks are contiguous from there,
// or !ok with the hole's length (0: no extent after fb).
func MapBlock(exts []Extent, fb uint64) (phys Blk, n uint64, ok bool) {
	i := sort.Search(len(exts), func(i int) bool { return exts[i].End() > fb })
	if i == len(exts) {
		return 0, 0, false
	}
	e := exts[i]
	if e.Logical <= fb {
		return e.Phys + Blk(fb-e.Logical), e.End() - fb, true
	}
	return 0, e.Logical - fb, false
}
