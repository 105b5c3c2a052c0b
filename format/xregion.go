package format

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
