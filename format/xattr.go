package format

import "fmt"

// Xattr is one extended attribute.
type Xattr struct {
	Name  string
	Value []byte
}

// XattrBlocks returns how many blocks the attributes need, or 0 if they
// exceed the largest region.
func XattrBlocks(xs []Xattr) int {
	n := XAEntries
	for _, x := range xs {
		n += XAEntryHeader + len(x.Name) + len(x.Value)
	}
	b := (n + BlockSize - 1) / BlockSize
	if b > XAMaxBlocks {
		return 0
	}
	return b
}

// EncodeXattrs writes the attributes into b, a region of len(b)/BlockSize
// blocks that the caller sized with XattrBlocks.
func EncodeXattrs(b []byte, xs []Xattr) {
	clear(b)
	p := XAEntries
	for _, x := range xs {
		b[p] = uint8(len(x.Name))
		b[p+1] = uint8(len(x.Value) >> 16)
		le.PutUint16(b[p+2:], uint16(len(x.Value)))
		p += XAEntryHeader
		p += copy(b[p:], x.Name)
		p += copy(b[p:], x.Value)
	}
	le.PutUint16(b[XACount:], uint16(len(xs)))
	le.PutUint16(b[XABlocks:], uint16(len(b)/BlockSize))
	le.PutUint32(b[XAUsed:], uint32(p-XAEntries))
	le.PutUint32(b[XACRC:], Checksum(b[4:]))
}

// XattrRegionBlocks reads the block count from a region's first block
// (unverified: DecodeXattrs checks it).
func XattrRegionBlocks(first []byte) int {
	if len(first) < XAEntries {
		return 0
	}
	return int(le.Uint16(first[XABlocks:]))
}

// DecodeXattrs parses an xattr region; b must hold at least the number of
// blocks its header names.
func DecodeXattrs(b []byte) ([]Xattr, error) {
	nb := XattrRegionBlocks(b)
	if nb < 1 || nb > XAMaxBlocks {
		return nil, fmt.Errorf("xattr region: %w: %d blocks", corrupt, nb)
	}
	if len(b) < nb*BlockSize {
		return nil, fmt.Errorf("xattr region: %w: short buffer", corrupt)
	}
	b = b[:nb*BlockSize]
	if got, want := le.Uint32(b[XACRC:]), Checksum(b[4:]); got != want {
		return nil, fmt.Errorf("xattr region: %w (stored %08x, computed %08x)", badChecksum, got, want)
	}
	n := int(le.Uint16(b[XACount:]))
	used := int(le.Uint32(b[XAUsed:]))
	if used > len(b)-XAEntries {
		return nil, fmt.Errorf("xattr region: %w: %d bytes used", corrupt, used)
	}
	xs := make([]Xattr, 0, n)
	p, end := XAEntries, XAEntries+used
	for i := 0; i < n; i++ {
		if p+XAEntryHeader > end {
			return nil, fmt.Errorf("xattr region: %w: entry %d past the end", corrupt, i)
		}
		nl, vl := int(b[p]), int(b[p+1])<<16|int(le.Uint16(b[p+2:]))
		p += XAEntryHeader
		if nl == 0 || vl > XAMaxValue || p+nl+vl > end {
			return nil, fmt.Errorf("xattr region: %w: entry %d length", corrupt, i)
		}
		x := Xattr{Name: string(b[p : p+nl]), Value: append([]byte{}, b[p+nl:p+nl+vl]...)}
		p += nl + vl
		xs = append(xs, x)
	}
	if p != end {
		return nil, fmt.Errorf("xattr region: %w: %d bytes unaccounted", corrupt, end-p)
	}
	return xs, nil
}

// DecodeXattrRegion reads the xattr region that starts at block x: its
// length from the first block's header, bounds against the data region
// (valid), and its attributes. read returns n blocks from b. Errors wrap
// ErrCorrupt or ErrBadChecksum; their text says what is wrong in words a
// checker shows as is.
func DecodeXattrRegion(x Blk, valid func(b Blk, n uint64) bool, read func(b Blk, n uint64) []byte) (xs []Xattr, nb uint64, err error) {
	if !valid(x, 1) {
		return nil, 0, damaged(nil, "xattr region at block %d lies outside the data region", x)
	}
	nb = uint64(XattrRegionBlocks(read(x, 1)))
	switch {
	case nb < 1 || nb > XAMaxBlocks:
		return nil, nb, damaged(nil, "xattr region at block %d claims %d blocks (1..%d)", x, nb, XAMaxBlocks)
	case !valid(x, nb):
		return nil, nb, damaged(nil, "xattr region at block %d (%d blocks) runs past the data region", x, nb)
	}
	xs, err = DecodeXattrs(read(x, nb))
	if err != nil {
		return nil, nb, damaged(err, "xattr region at block %d: %s", x, trimPrefix(err.Error(), "xattr region: "))
	}
	return xs, nb, nil
}
