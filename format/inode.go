package format

import "fmt"

// Inode is the decoded persistent part of an inode.
type Inode struct {
	Mode     uint32
	UID, GID uint32
	Nlink    uint32
	Flags    uint32
	Size     uint64
	Gen      uint64
	Atime    int64
	Mtime    int64
	Ctime    int64
	Xattr    Blk
	Overflow Blk
	Extents  uint32 // total extent count
	Rdev     uint32 // character and block devices only
	Inline   [InlineExtents]Extent
	Btime    int64 // birth time, ns; 0 = unknown
	// Session holds bytes 184..255 (session fields and the table
	// descriptor); the birth time's bytes in it are always zero, the
	// value lives in Btime.
	Session [InodeSize - INSession]byte
}

// IsDir etc. report the file type.
func (in *Inode) IsDir() bool     { return in.Mode&ModeType == ModeDir }
func (in *Inode) IsReg() bool     { return in.Mode&ModeType == ModeReg }
func (in *Inode) IsSymlink() bool { return in.Mode&ModeType == ModeLnk }

// IsSpecial reports a FIFO, socket or device node: an inode with no data.
func (in *Inode) IsSpecial() bool { return IsSpecialMode(in.Mode) }

// IsSpecialMode reports whether mode's file type is a FIFO, socket or
// character or block device.
func IsSpecialMode(mode uint32) bool {
	switch mode & ModeType {
	case ModeFifo, ModeSock, ModeChr, ModeBlk:
		return true
	}
	return false
}

// Encode writes the inode into b (InodeSize bytes) with its checksum.
func (in *Inode) Encode(b []byte) {
	b = b[:InodeSize]
	clear(b)
	le.PutUint32(b[INMode:], in.Mode)
	le.PutUint32(b[INUID:], in.UID)
	le.PutUint32(b[INGID:], in.GID)
	le.PutUint32(b[INNlink:], in.Nlink)
	le.PutUint32(b[INFlags:], in.Flags)
	le.PutUint64(b[INSize:], in.Size)
	le.PutUint64(b[INGen:], in.Gen)
	le.PutUint64(b[INAtime:], uint64(in.Atime))
	le.PutUint64(b[INMtime:], uint64(in.Mtime))
	le.PutUint64(b[INCtime:], uint64(in.Ctime))
	le.PutUint64(b[INXattr:], uint64(in.Xattr))
	le.PutUint64(b[INOverflow:], uint64(in.Overflow))
	le.PutUint32(b[INExtentCount:], in.Extents)
	le.PutUint32(b[INRdev:], in.Rdev)
	for i, e := range in.Inline {
		encodeExtent(b[INInline+i*ExtentSize:], e)
	}
	copy(b[INSession:], in.Session[:])
	le.PutUint64(b[INBtime:], uint64(in.Btime))
	le.PutUint32(b[INCRC:], Checksum(b[4:]))
}

// DecodeInode parses an inode slot. A free (all-zero) slot decodes to an
// Inode with Mode 0 and no error.
func DecodeInode(b []byte) (Inode, error) {
	var in Inode
	if len(b) < InodeSize {
		return in, fmt.Errorf("inode: %w: short buffer", corrupt)
	}
	b = b[:InodeSize]
	if IsZero(b) {
		return in, nil
	}
	if got, want := le.Uint32(b[INCRC:]), Checksum(b[4:]); got != want {
		return in, fmt.Errorf("inode: %w (stored %08x, computed %08x)", badChecksum, got, want)
	}
	in.Mode = le.Uint32(b[INMode:])
	in.UID = le.Uint32(b[INUID:])
	in.GID = le.Uint32(b[INGID:])
	in.Nlink = le.Uint32(b[INNlink:])
	in.Flags = le.Uint32(b[INFlags:])
	in.Size = le.Uint64(b[INSize:])
	in.Gen = le.Uint64(b[INGen:])
	in.Atime = int64(le.Uint64(b[INAtime:]))
	in.Mtime = int64(le.Uint64(b[INMtime:]))
	in.Ctime = int64(le.Uint64(b[INCtime:]))
	in.Xattr = Blk(le.Uint64(b[INXattr:]))
	in.Overflow = Blk(le.Uint64(b[INOverflow:]))
	in.Extents = le.Uint32(b[INExtentCount:])
	in.Rdev = le.Uint32(b[INRdev:])
	for i := range in.Inline {
		in.Inline[i] = decodeExtent(b[INInline+i*ExtentSize:])
	}
	copy(in.Session[:], b[INSession:])
	in.Btime = int64(le.Uint64(b[INBtime:]))
	clear(in.Session[INBtime-INSession : INBtime-INSession+8])
	switch in.Mode & ModeType {
	case ModeReg, ModeDir, ModeLnk, ModeFifo, ModeSock, ModeChr, ModeBlk:
	default:
		return in, fmt.Errorf("inode: %w: file type %#o", corrupt, in.Mode&ModeType)
	}
	if in.Size > MaxFileSize {
		return in, fmt.Errorf("inode: %w: size %d", corrupt, in.Size)
	}
	return in, nil
}
