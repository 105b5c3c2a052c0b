package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// On-media identities.
type (
	// Ino is an inode number: the index of an inode slot in the inode table.
	// Slot 0 is never used, so 0 means "none"; the root directory is 1.
	Ino uint64
	// Blk is a block number counted from the start of the pool.
	Blk uint64
	// Off is a byte offset from the start of the pool.
	Off uint64
)

// Geometry and identity constants.
const (
	BlockSize  = 4096
	BlockShift = 12

	Magic   uint64 = 0x314C4F5053464E44 // "DNFSPOL1" little-endian
	Version uint32 = 1

	SuperPrimary Blk = 0
	SuperReplica Blk = 1
	JournalStart Blk = 2

	RootIno Ino = 1

	MinPoolSize = 4 << 20 // smallest pool mkfs accepts
)

// Off returns the byte offset of block b.
func (b Blk) Off() Off { return Off(b) << BlockShift }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C used by every structure.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

var le = binary.LittleEndian

// Sentinel errors returned by decoders.
var (
	// ErrBadMagic: the bytes are not a dnnfs superblock (not a pool, or
	// overwritten).
	ErrBadMagic = errors.New("bad magic: not a dnnfs pool")
	// ErrBadChecksum: a structure's stored CRC does not match its bytes
	// (torn write or media corruption).
	ErrBadChecksum = errors.New("checksum mismatch")
	// ErrBadVersion: the pool was made by an incompatible dnnfs.
	ErrBadVersion = errors.New("unsupported format version")
	// ErrCorrupt: a field holds a value that cannot be (out of range, etc).
	ErrCorrupt = errors.New("corrupt structure")
)

// ---------------------------------------------------------------------
// Superblock

// Superblock field offsets (FORMAT.md "Superblock").
const (
	SBMagic        = 0   // u64
	SBVersion      = 8   // u32
	SBBlockSize    = 12  // u32
	SBBlocks       = 16  // u64 total blocks in the pool
	SBUUID         = 24  // [16]byte
	SBJournalStart = 40  // u64 Blk
	SBJournalLen   = 48  // u64 blocks
	SBInodeStart   = 56  // u64 Blk
	SBInodeCount   = 64  // u64 inode slots (including unused slot 0)
	SBDataStart    = 72  // u64 Blk
	SBCreated      = 80  // i64 unix ns
	SBState        = 88  // u64 StateClean / StateMounted
	SBMountCount   = 96  // u64
	SBMountTime    = 104 // i64 unix ns of the last mount
	SBTier         = 112 // u64 Blk of the SSD-tier registry block, 0 = none
	SBCRC          = 252 // u32 CRC-32C of bytes [0, 252)
	SuperSize      = 256
)

// Superblock states.
const (
	StateClean   uint64 = 0 // unmounted cleanly: journal empty, no orphans
	StateMounted uint64 = 1 // a daemon has it (or crashed with it)
)

// Superblock is the decoded superblock.
type Superblock struct {
	Blocks       uint64
	UUID         [16]byte
	JournalStart Blk
	JournalLen   uint64
	InodeStart   Blk
	InodeCount   uint64
	DataStart    Blk
	Created      int64
	State        uint64
	MountCount   uint64
	MountTime    int64
	Tier         Blk // SSD-tier registry block (embedding tables), 0 = none
}

// InodesPerBlock is how many inode slots fit in a block.
const InodesPerBlock = BlockSize / InodeSize

// Geometry computes the layout of a pool of the given size in bytes.
func Geometry(size int64) (Superblock, error) {
	if size < MinPoolSize {
		return Superblock{}, fmt.Errorf("%d bytes: smaller than the %d-byte minimum", size, MinPoolSize)
	}
	blocks := uint64(size) / BlockSize
	// Journal: 1/64 of the pool, between 256 KiB and 16 MiB: it must hold
	// the largest single metadata transaction.
	jlen := blocks / 64
	jlen = max(64, min(jlen, 4096))
	// One inode per 64 KiB of pool, at least 1024, at most 4M.
	icount := max(uint64(1024), min(uint64(size)/(64<<10), 4<<20))
	icount = (icount + InodesPerBlock - 1) / InodesPerBlock * InodesPerBlock
	iblocks := icount / InodesPerBlock
	sb := Superblock{
		Blocks:       blocks,
		JournalStart: JournalStart,
		JournalLen:   jlen,
		InodeStart:   JournalStart + Blk(jlen),
		InodeCount:   icount,
	}
	sb.DataStart = sb.InodeStart + Blk(iblocks)
	if uint64(sb.DataStart)+16 > blocks {
		return Superblock{}, fmt.Errorf("%d bytes: too small for the metadata regions", size)
	}
	return sb, nil
}

// Encode writes sb into b (at least SuperSize bytes) with its checksum.
func (sb *Superblock) Encode(b []byte) {
	clear(b[:SuperSize])
	le.PutUint64(b[SBMagic:], Magic)
	le.PutUint32(b[SBVersion:], Version)
	le.PutUint32(b[SBBlockSize:], BlockSize)
	le.PutUint64(b[SBBlocks:], sb.Blocks)
	copy(b[SBUUID:SBUUID+16], sb.UUID[:])
	le.PutUint64(b[SBJournalStart:], uint64(sb.JournalStart))
	le.PutUint64(b[SBJournalLen:], sb.JournalLen)
	le.PutUint64(b[SBInodeStart:], uint64(sb.InodeStart))
	le.PutUint64(b[SBInodeCount:], sb.InodeCount)
	le.PutUint64(b[SBDataStart:], uint64(sb.DataStart))
	le.PutUint64(b[SBCreated:], uint64(sb.Created))
	le.PutUint64(b[SBState:], sb.State)
	le.PutUint64(b[SBMountCount:], sb.MountCount)
	le.PutUint64(b[SBMountTime:], uint64(sb.MountTime))
	le.PutUint64(b[SBTier:], uint64(sb.Tier))
	le.PutUint32(b[SBCRC:], Checksum(b[:SBCRC]))
}

// DecodeSuperblock parses and validates a superblock. poolSize is the size
// of the medium in bytes; the geometry must fit inside it.
func DecodeSuperblock(b []byte, poolSize int64) (Superblock, error) {
	var sb Superblock
	if len(b) < SuperSize {
		return sb, fmt.Errorf("superblock: %w: short buffer", ErrCorrupt)
	}
	if le.Uint64(b[SBMagic:]) != Magic {
		return sb, ErrBadMagic
	}
	if got, want := le.Uint32(b[SBCRC:]), Checksum(b[:SBCRC]); got != want {
		return sb, fmt.Errorf("superblock: %w (stored %08x, computed %08x)", ErrBadChecksum, got, want)
	}
	if v := le.Uint32(b[SBVersion:]); v != Version {
		return sb, fmt.Errorf("superblock: %w %d (this dnnfs reads %d)", ErrBadVersion, v, Version)
	}
	if bs := le.Uint32(b[SBBlockSize:]); bs != BlockSize {
		return sb, fmt.Errorf("superblock: %w: block size %d", ErrCorrupt, bs)
	}
	sb.Blocks = le.Uint64(b[SBBlocks:])
	copy(sb.UUID[:], b[SBUUID:SBUUID+16])
	sb.JournalStart = Blk(le.Uint64(b[SBJournalStart:]))
	sb.JournalLen = le.Uint64(b[SBJournalLen:])
	sb.InodeStart = Blk(le.Uint64(b[SBInodeStart:]))
	sb.InodeCount = le.Uint64(b[SBInodeCount:])
	sb.DataStart = Blk(le.Uint64(b[SBDataStart:]))
	sb.Created = int64(le.Uint64(b[SBCreated:]))
	sb.State = le.Uint64(b[SBState:])
	sb.MountCount = le.Uint64(b[SBMountCount:])
	sb.MountTime = int64(le.Uint64(b[SBMountTime:]))
	sb.Tier = Blk(le.Uint64(b[SBTier:]))
	if err := sb.check(poolSize); err != nil {
		return sb, fmt.Errorf("superblock: %w: %v", ErrCorrupt, err)
	}
	return sb, nil
}

func (sb *Superblock) check(poolSize int64) error {
	switch {
	case sb.Blocks == 0 || sb.Blocks > uint64(poolSize)/BlockSize:
		return fmt.Errorf("%d blocks do not fit a %d-byte medium", sb.Blocks, poolSize)
	case sb.JournalStart != JournalStart || sb.JournalLen < 2 || sb.JournalLen > 1<<20:
		return fmt.Errorf("journal at block %d, %d blocks", sb.JournalStart, sb.JournalLen)
	case uint64(sb.InodeStart) != uint64(sb.JournalStart)+sb.JournalLen:
		return fmt.Errorf("inode table at block %d", sb.InodeStart)
	case sb.InodeCount < 2 || sb.InodeCount%InodesPerBlock != 0 || sb.InodeCount > 1<<32:
		return fmt.Errorf("inode count %d", sb.InodeCount)
	case uint64(sb.DataStart) != uint64(sb.InodeStart)+sb.InodeCount/InodesPerBlock:
		return fmt.Errorf("data start block %d", sb.DataStart)
	case uint64(sb.DataStart) >= sb.Blocks:
		return fmt.Errorf("data start %d beyond %d blocks", sb.DataStart, sb.Blocks)
	case sb.State > StateMounted:
		return fmt.Errorf("state %d", sb.State)
	case sb.Tier != 0 && !sb.ValidData(sb.Tier, 1):
		return fmt.Errorf("SSD-tier registry at block %d outside the data region", sb.Tier)
	}
	return nil
}

// InodeOff returns the byte offset of inode slot ino.
func (sb *Superblock) InodeOff(ino Ino) Off {
	return sb.InodeStart.Off() + Off(ino)*InodeSize
}

// ValidData reports whether blocks [b, b+n) all lie in the data region.
func (sb *Superblock) ValidData(b Blk, n uint64) bool {
	return b >= sb.DataStart && n <= sb.Blocks && uint64(b) <= sb.Blocks-n
}

// ---------------------------------------------------------------------
// Journal

// Journal header (first bytes of block JournalStart) and transaction
// layout (from block JournalStart+1). See FORMAT.md "Metadata journal".
const (
	JHMagic  = 0  // u64 JournalMagic
	JHCommit = 8  // u64 sequence number of the committed, not yet retired transaction; 0 = none
	JHSize   = 16 // header bytes used

	JournalMagic uint64 = 0x4C4E524A53464E44 // "DNFSJRNL"

	TxSeq    = 0  // u64 sequence number (never 0)
	TxCount  = 8  // u32 number of records
	TxLen    = 12 // u32 bytes of records following the header
	TxCRC    = 16 // u32 CRC-32C of [0,16) and the record bytes
	TxHeader = 24 // header size; records follow

	RecOff    = 0 // u64 target byte offset in the pool
	RecLen    = 8 // u32 data length
	RecHeader = 16
	// Record data is padded to 8 bytes.
)

// ---------------------------------------------------------------------
// Inode

// Inode field offsets (FORMAT.md "Inode").
const (
	InodeSize     = 256
	INCRC         = 0   // u32 CRC-32C of [4, 256)
	INMode        = 4   // u32 file type and permission bits (S_IFMT|0777 and suid/sgid/sticky)
	INUID         = 8   // u32
	INGID         = 12  // u32
	INNlink       = 16  // u32
	INFlags       = 20  // u32 InodeOrphan, InodeTable, the chattr attributes
	INSize        = 24  // u64 bytes
	INGen         = 32  // u64 generation
	INAtime       = 40  // i64 ns
	INMtime       = 48  // i64 ns
	INCtime       = 56  // i64 ns
	INXattr       = 64  // u64 Blk of the first block of the xattr region, 0 = none
	INOverflow    = 72  // u64 Blk of the first extent overflow block, 0 = none
	INExtentCount = 80  // u32 extents in total (inline + overflow)
	INRdev        = 84  // u32 device number (FUSE's 32-bit encoding) of a character or block device, else 0
	INInline      = 88  // InlineExtents x ExtentSize
	INSession     = 184 // 72 bytes reserved for the segmented-I/O session (Process_num, F_flag, F_log_addr)
	INBtime       = 212 // i64 ns birth time (set at create); 0 = unknown (made before birth times were kept)
	InlineExtents = 4
	ExtentSize    = 24
)

// Inode flags.
const (
	// InodeOrphan: unlinked while open; freed when the last handle closes,
	// or at the next mount.
	InodeOrphan uint32 = 1 << 0
	// InodeTable: an embedding table; its bytes live on the SSD tier and
	// INTable names its descriptor (it maps no pool data blocks).
	InodeTable uint32 = 1 << 1
	// The file attributes chattr(1) sets (FS_IOC_SETFLAGS): immutable (no
	// change to data, attributes or names), append-only (data only added
	// at the end, no removal or rename), not for dump(8), and no access
	// time updates.
	InodeImmutable uint32 = 1 << 2
	InodeAppend    uint32 = 1 << 3
	InodeNoDump    uint32 = 1 << 4
	InodeNoAtime   uint32 = 1 << 5
	// InodeAttrFlags are the chattr attributes.
	InodeAttrFlags = InodeImmutable | InodeAppend | InodeNoDump | InodeNoAtime
	// InodeFlagsKnown are all the flags a valid inode may carry.
	InodeFlagsKnown = InodeOrphan | InodeTable | InodeAttrFlags
)

// File types as stored in INMode (same values as Linux S_IFMT).
const (
	ModeType uint32 = 0o170000
	ModeReg  uint32 = 0o100000
	ModeDir  uint32 = 0o040000
	ModeLnk  uint32 = 0o120000
	ModeFifo uint32 = 0o010000
	ModeChr  uint32 = 0o020000
	ModeBlk  uint32 = 0o060000
	ModeSock uint32 = 0o140000
	ModePerm uint32 = 0o7777
)

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

// ExtentUnwritten is the unwritten flag in an extent's len field.
const ExtentUnwritten uint64 = 1 << 63

// End is the first file block after the extent.
func (e Extent) End() uint64 { return e.Logical + e.Len }

// Extent field offsets within its 24 bytes.
const (
	EXLogical = 0
	EXPhys    = 8
	EXLen     = 16
)

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

// IsZero reports whether b (an inode slot) is all zero, i.e. free.
func IsZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// DecodeInode parses an inode slot. A free (all-zero) slot decodes to an
// Inode with Mode 0 and no error.
func DecodeInode(b []byte) (Inode, error) {
	var in Inode
	if len(b) < InodeSize {
		return in, fmt.Errorf("inode: %w: short buffer", ErrCorrupt)
	}
	b = b[:InodeSize]
	if IsZero(b) {
		return in, nil
	}
	if got, want := le.Uint32(b[INCRC:]), Checksum(b[4:]); got != want {
		return in, fmt.Errorf("inode: %w (stored %08x, computed %08x)", ErrBadChecksum, got, want)
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
		return in, fmt.Errorf("inode: %w: file type %#o", ErrCorrupt, in.Mode&ModeType)
	}
	if in.Size > MaxFileSize {
		return in, fmt.Errorf("inode: %w: size %d", ErrCorrupt, in.Size)
	}
	return in, nil
}

// ---------------------------------------------------------------------
// Extent overflow block

// Overflow block layout (FORMAT.md "Extent overflow block").
const (
	OVCRC        = 0  // u32 CRC-32C of [4, 4096)
	OVCount      = 4  // u32 extents in this block
	OVNext       = 8  // u64 Blk of the next overflow block, 0 = last
	OVExtents    = 16 // OverflowSlots x ExtentSize
	OverflowSlot = (BlockSize - OVExtents) / ExtentSize
)

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
		return nil, 0, fmt.Errorf("extent block: %w: short buffer", ErrCorrupt)
	}
	if got, want := le.Uint32(b[OVCRC:]), Checksum(b[4:BlockSize]); got != want {
		return nil, 0, fmt.Errorf("extent block: %w (stored %08x, computed %08x)", ErrBadChecksum, got, want)
	}
	n := le.Uint32(b[OVCount:])
	if n > OverflowSlot {
		return nil, 0, fmt.Errorf("extent block: %w: %d extents", ErrCorrupt, n)
	}
	exts = make([]Extent, n)
	for i := range exts {
		exts[i] = decodeExtent(b[OVExtents+i*ExtentSize:])
	}
	return exts, Blk(le.Uint64(b[OVNext:])), nil
}

// ---------------------------------------------------------------------
// Directory blocks

// A directory's data is a sequence of blocks of fixed-size entry slots.
// Slot i of the directory is in block i/DirentsPerBlock. A slot whose bytes
// are all zero is free. See FORMAT.md "Directory entry".
const (
	DirentSize      = 272
	DirentsPerBlock = BlockSize / DirentSize // 15; the last 16 bytes of a block are unused
	DECRC           = 0                      // u32 CRC-32C of [4, 272)
	DENameLen       = 4                      // u8 1..255
	DEType          = 5                      // u8 DT_* of the target
	DEIno           = 8                      // u64
	DEName          = 16                     // [255]byte
	MaxNameLen      = 255
)

// Dirent types (Linux DT_*).
const (
	DTFifo uint8 = 1
	DTChr  uint8 = 2
	DTDir  uint8 = 4
	DTBlk  uint8 = 6
	DTReg  uint8 = 8
	DTLnk  uint8 = 10
	DTSock uint8 = 12
)

// DTOf returns the dirent type for an inode mode.
func DTOf(mode uint32) uint8 {
	switch mode & ModeType {
	case ModeDir:
		return DTDir
	case ModeLnk:
		return DTLnk
	case ModeFifo:
		return DTFifo
	case ModeChr:
		return DTChr
	case ModeBlk:
		return DTBlk
	case ModeSock:
		return DTSock
	}
	return DTReg
}

// ModeOfDT is the file type bits of a dirent type (DTOf's inverse).
func ModeOfDT(t uint8) uint32 {
	switch t {
	case DTDir:
		return ModeDir
	case DTLnk:
		return ModeLnk
	case DTFifo:
		return ModeFifo
	case DTChr:
		return ModeChr
	case DTBlk:
		return ModeBlk
	case DTSock:
		return ModeSock
	}
	return ModeReg
}

// Dirent is a decoded directory entry.
type Dirent struct {
	Name string
	Type uint8
	Ino  Ino
}

// DirentOff returns the byte offset of slot i inside the directory's data.
func DirentOff(slot uint64) uint64 {
	return slot/DirentsPerBlock*BlockSize + slot%DirentsPerBlock*DirentSize
}

// Encode writes the entry into b (DirentSize bytes).
func (d *Dirent) Encode(b []byte) {
	b = b[:DirentSize]
	clear(b)
	b[DENameLen] = uint8(len(d.Name))
	b[DEType] = d.Type
	le.PutUint64(b[DEIno:], uint64(d.Ino))
	copy(b[DEName:], d.Name)
	le.PutUint32(b[DECRC:], Checksum(b[4:]))
}

// DecodeDirent parses a slot; ok is false for a free slot.
func DecodeDirent(b []byte) (d Dirent, ok bool, err error) {
	if len(b) < DirentSize {
		return d, false, fmt.Errorf("dirent: %w: short buffer", ErrCorrupt)
	}
	b = b[:DirentSize]
	if IsZero(b) {
		return d, false, nil
	}
	if got, want := le.Uint32(b[DECRC:]), Checksum(b[4:]); got != want {
		return d, false, fmt.Errorf("dirent: %w (stored %08x, computed %08x)", ErrBadChecksum, got, want)
	}
	n := int(b[DENameLen])
	if n == 0 {
		return d, false, fmt.Errorf("dirent: %w: empty name", ErrCorrupt)
	}
	d.Name = string(b[DEName : DEName+n])
	d.Type = b[DEType]
	d.Ino = Ino(le.Uint64(b[DEIno:]))
	if d.Ino == 0 {
		return d, false, fmt.Errorf("dirent %q: %w: inode 0", d.Name, ErrCorrupt)
	}
	for i := 0; i < len(d.Name); i++ {
		if d.Name[i] == '/' || d.Name[i] == 0 {
			return d, false, fmt.Errorf("dirent: %w: name contains %q", ErrCorrupt, d.Name[i])
		}
	}
	if d.Name == "." || d.Name == ".." {
		return d, false, fmt.Errorf("dirent: %w: reserved name %q", ErrCorrupt, d.Name)
	}
	return d, true, nil
}

// ---------------------------------------------------------------------
// Xattr block

// An inode's extended attributes live packed in one region of XABlocks
// contiguous blocks (1..XAMaxBlocks). See FORMAT.md "Xattr region".
const (
	XACRC     = 0  // u32 CRC-32C of [4, XABlocks*4096)
	XACount   = 4  // u16 entries
	XABlocks  = 6  // u16 blocks in the region
	XAUsed    = 8  // u32 bytes of entries after the header
	XAEntries = 12 // first entry
	// Entry: u8 name length, u8 value length bits 16..23, u16 value
	// length bits 0..15, name, value. The high byte was reserved (zero)
	// before values could reach the kernel's 65536-byte limit.
	XAEntryHeader = 4
	XAMaxBlocks   = 17 // room for one 65536-byte value with its name
	XAMaxValue    = 65536
	XAMaxName     = 255
)

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
		return nil, fmt.Errorf("xattr region: %w: %d blocks", ErrCorrupt, nb)
	}
	if len(b) < nb*BlockSize {
		return nil, fmt.Errorf("xattr region: %w: short buffer", ErrCorrupt)
	}
	b = b[:nb*BlockSize]
	if got, want := le.Uint32(b[XACRC:]), Checksum(b[4:]); got != want {
		return nil, fmt.Errorf("xattr region: %w (stored %08x, computed %08x)", ErrBadChecksum, got, want)
	}
	n := int(le.Uint16(b[XACount:]))
	used := int(le.Uint32(b[XAUsed:]))
	if used > len(b)-XAEntries {
		return nil, fmt.Errorf("xattr region: %w: %d bytes used", ErrCorrupt, used)
	}
	xs := make([]Xattr, 0, n)
	p, end := XAEntries, XAEntries+used
	for i := 0; i < n; i++ {
		if p+XAEntryHeader > end {
			return nil, fmt.Errorf("xattr region: %w: entry %d past the end", ErrCorrupt, i)
		}
		nl, vl := int(b[p]), int(b[p+1])<<16|int(le.Uint16(b[p+2:]))
		p += XAEntryHeader
		if nl == 0 || vl > XAMaxValue || p+nl+vl > end {
			return nil, fmt.Errorf("xattr region: %w: entry %d length", ErrCorrupt, i)
		}
		x := Xattr{Name: string(b[p : p+nl]), Value: append([]byte{}, b[p+nl:p+nl+vl]...)}
		p += nl + vl
		xs = append(xs, x)
	}
	if p != end {
		return nil, fmt.Errorf("xattr region: %w: %d bytes unaccounted", ErrCorrupt, end-p)
	}
	return xs, nil
}

// ---------------------------------------------------------------------
// Segmented-I/O session (DESIGN.md §Two-layer log)

// Session fields in the inode's reserved area (FORMAT.md "Inode").
const (
	INProcessNum  = 184 // u32 Process_num: segments (= threads) of the session; 0 = none
	INFFlag       = 188 // u32 F_flag: 0 = file access not finished, 1 = finished
	INFLogAddr    = 192 // u64 F_log_addr: Blk of the F_log, 0 = NULL (no open session)
	INSessionSize = 200 // u64 bytes the session covers
	INSessionMode = 208 // u32 SessionWrite or SessionRead
)

// Session modes.
const (
	SessionWrite uint32 = 1
	SessionRead  uint32 = 2
)

// F_log layout: a header, then one 64-byte entry per segment, each on its
// own cache line with its own checksum, so finishing a segment rewrites
// one entry. See FORMAT.md "F_log".
const (
	FLCRC      = 0  // u32 CRC-32C of header bytes [4, 24)
	FLCount    = 4  // u32 entries
	FLPLogBlk  = 8  // u64 Blk of the P_log region (one 64-byte line per segment)
	FLBlocks   = 16 // u32 blocks of the F_log region
	FLPBlocks  = 20 // u32 blocks of the P_log region
	FLHeader   = 64 // entries start here (cache-line aligned)
	FLEntry    = 64 // bytes per entry
	FEPid      = 0  // u32 Pid: thread of the first request in the segment
	FEPFlag    = 4  // u32 P_flag: 0 = segment not finished, 1 = finished
	FEPartHead = 8  // u64 Part_addr_head: segment start (file byte offset)
	FEPLength  = 16 // u64 P_length: segment length
	FEPLogAddr = 24 // u64 P_log_addr: pool byte offset of the segment's Tail_ptr, 0 = NULL
	FENext     = 32 // u64 Next: pool byte offset of the next entry, 0 = last
	FECRC      = 60 // u32 CRC-32C of entry bytes [0, 60)
	PLogLine   = 64 // one P_log per cache line; Tail_ptr is its first 8 bytes
	MaxThreads = 1024
)

// FEntry is a decoded F_log entry.
type FEntry struct {
	Pid      uint32
	PFlag    uint32
	PartHead uint64
	PLength  uint64
	PLogAddr Off
	Next     Off
}

// Encode writes the entry (FLEntry bytes) with its checksum.
func (e *FEntry) Encode(b []byte) {
	b = b[:FLEntry]
	clear(b)
	le.PutUint32(b[FEPid:], e.Pid)
	le.PutUint32(b[FEPFlag:], e.PFlag)
	le.PutUint64(b[FEPartHead:], e.PartHead)
	le.PutUint64(b[FEPLength:], e.PLength)
	le.PutUint64(b[FEPLogAddr:], uint64(e.PLogAddr))
	le.PutUint64(b[FENext:], uint64(e.Next))
	le.PutUint32(b[FECRC:], Checksum(b[:FECRC]))
}

// DecodeFEntry parses an F_log entry.
func DecodeFEntry(b []byte) (FEntry, error) {
	var e FEntry
	if len(b) < FLEntry {
		return e, fmt.Errorf("F_log entry: %w: short buffer", ErrCorrupt)
	}
	if got, want := le.Uint32(b[FECRC:]), Checksum(b[:FECRC]); got != want {
		return e, fmt.Errorf("F_log entry: %w (stored %08x, computed %08x)", ErrBadChecksum, got, want)
	}
	e.Pid = le.Uint32(b[FEPid:])
	e.PFlag = le.Uint32(b[FEPFlag:])
	e.PartHead = le.Uint64(b[FEPartHead:])
	e.PLength = le.Uint64(b[FEPLength:])
	e.PLogAddr = Off(le.Uint64(b[FEPLogAddr:]))
	e.Next = Off(le.Uint64(b[FENext:]))
	if e.PFlag > 1 {
		return e, fmt.Errorf("F_log entry: %w: P_flag %d", ErrCorrupt, e.PFlag)
	}
	return e, nil
}

// FLogHeader is the decoded F_log header.
type FLogHeader struct {
	Count   uint32
	PLog    Blk
	Blocks  uint32
	PBlocks uint32
}

// FLogBlocks returns the region sizes for n segments.
func FLogBlocks(n int) (flog, plog uint32) {
	return uint32((FLHeader + n*FLEntry + BlockSize - 1) / BlockSize), uint32((n*PLogLine + BlockSize - 1) / BlockSize)
}

// Encode writes the header (FLHeader bytes) with its checksum.
func (h *FLogHeader) Encode(b []byte) {
	b = b[:FLHeader]
	clear(b)
	le.PutUint32(b[FLCount:], h.Count)
	le.PutUint64(b[FLPLogBlk:], uint64(h.PLog))
	le.PutUint32(b[FLBlocks:], h.Blocks)
	le.PutUint32(b[FLPBlocks:], h.PBlocks)
	le.PutUint32(b[FLCRC:], Checksum(b[4:24]))
}

// DecodeFLogHeader parses and sanity-checks an F_log header.
func DecodeFLogHeader(b []byte) (FLogHeader, error) {
	var h FLogHeader
	if len(b) < FLHeader {
		return h, fmt.Errorf("F_log: %w: short buffer", ErrCorrupt)
	}
	if got, want := le.Uint32(b[FLCRC:]), Checksum(b[4:24]); got != want {
		return h, fmt.Errorf("F_log: %w (stored %08x, computed %08x)", ErrBadChecksum, got, want)
	}
	h.Count = le.Uint32(b[FLCount:])
	h.PLog = Blk(le.Uint64(b[FLPLogBlk:]))
	h.Blocks = le.Uint32(b[FLBlocks:])
	h.PBlocks = le.Uint32(b[FLPBlocks:])
	if h.Count < 1 || h.Count > MaxThreads {
		return h, fmt.Errorf("F_log: %w: %d entries", ErrCorrupt, h.Count)
	}
	if f, p := FLogBlocks(int(h.Count)); f != h.Blocks || p != h.PBlocks {
		return h, fmt.Errorf("F_log: %w: region sizes %d/%d for %d entries", ErrCorrupt, h.Blocks, h.PBlocks, h.Count)
	}
	return h, nil
}

// SessionFields reads the session part of an inode's reserved area.
func (in *Inode) SessionFields() (processNum, fFlag uint32, fLog Blk, size uint64, mode uint32) {
	s := in.Session[:]
	return le.Uint32(s[INProcessNum-INSession:]), le.Uint32(s[INFFlag-INSession:]),
		Blk(le.Uint64(s[INFLogAddr-INSession:])), le.Uint64(s[INSessionSize-INSession:]), le.Uint32(s[INSessionMode-INSession:])
}

// SetSessionFields writes the session part of the reserved area.
func (in *Inode) SetSessionFields(processNum, fFlag uint32, fLog Blk, size uint64, mode uint32) {
	s := in.Session[:]
	le.PutUint32(s[INProcessNum-INSession:], processNum)
	le.PutUint32(s[INFFlag-INSession:], fFlag)
	le.PutUint64(s[INFLogAddr-INSession:], uint64(fLog))
	le.PutUint64(s[INSessionSize-INSession:], size)
	le.PutUint32(s[INSessionMode-INSession:], mode)
}

// ---------------------------------------------------------------------
// SSD tier: device registry, device label, embedding-table descriptor
// (DESIGN.md §Embedding tier; FORMAT.md "SSD tier").

// INTable is the inode field naming an embedding table's descriptor.
const INTable = 248 // u64 Blk of the table descriptor (InodeTable set), else 0

// TableBlk returns the table descriptor block of a table inode.
func (in *Inode) TableBlk() Blk { return Blk(le.Uint64(in.Session[INTable-INSession:])) }

// SetTableBlk sets the table descriptor block.
func (in *Inode) SetTableBlk(b Blk) { le.PutUint64(in.Session[INTable-INSession:], uint64(b)) }

// DevID names an SSD-tier device: its slot in the registry plus one, so 0
// means "none".
type DevID uint16

// Tier registry block: one block at Superblock.Tier listing the devices.
const (
	TRCRC          = 0  // u32 CRC-32C of [4, 4096)
	TRCount        = 4  // u32 devices registered (ids 1 .. count)
	TRMagic        = 8  // u64 TierMagic
	TREntries      = 64 // first device entry
	TierDevSize    = 256
	MaxTierDevices = (BlockSize - TREntries) / TierDevSize // 15
	TDUUID         = 0                                     // [16]byte device identity, also in the device label
	TDFlags        = 16                                    // u32 reserved, zero
	TDPathLen      = 20                                    // u16
	TDPath         = 32                                    // [224]byte directory given when the device was registered (a hint for admins)
	MaxTierPath    = TierDevSize - TDPath

	TierMagic uint64 = 0x5245495453464E44 // "DNFSTIER"
)

// TierDevice is one registered SSD-tier device.
type TierDevice struct {
	UUID [16]byte
	Path string
}

// EncodeTier writes the registry block.
func EncodeTier(b []byte, devs []TierDevice) {
	b = b[:BlockSize]
	clear(b)
	le.PutUint32(b[TRCount:], uint32(len(devs)))
	le.PutUint64(b[TRMagic:], TierMagic)
	for i, d := range devs {
		e := b[TREntries+i*TierDevSize:]
		copy(e[TDUUID:TDUUID+16], d.UUID[:])
		p := d.Path
		if len(p) > MaxTierPath {
			p = p[len(p)-MaxTierPath:]
		}
		le.PutUint16(e[TDPathLen:], uint16(len(p)))
		copy(e[TDPath:], p)
	}
	le.PutUint32(b[TRCRC:], Checksum(b[4:]))
}

// DecodeTier parses the registry block.
func DecodeTier(b []byte) ([]TierDevice, error) {
	if len(b) < BlockSize {
		return nil, fmt.Errorf("tier registry: %w: short buffer", ErrCorrupt)
	}
	b = b[:BlockSize]
	if got, want := le.Uint32(b[TRCRC:]), Checksum(b[4:]); got != want {
		return nil, fmt.Errorf("tier registry: %w (stored %08x, computed %08x)", ErrBadChecksum, got, want)
	}
	if le.Uint64(b[TRMagic:]) != TierMagic {
		return nil, fmt.Errorf("tier registry: %w: bad magic", ErrCorrupt)
	}
	n := le.Uint32(b[TRCount:])
	if n > MaxTierDevices {
		return nil, fmt.Errorf("tier registry: %w: %d devices", ErrCorrupt, n)
	}
	devs := make([]TierDevice, n)
	for i := range devs {
		e := b[TREntries+i*TierDevSize:]
		copy(devs[i].UUID[:], e[TDUUID:TDUUID+16])
		pl := int(le.Uint16(e[TDPathLen:]))
		if pl > MaxTierPath || devs[i].UUID == [16]byte{} {
			return nil, fmt.Errorf("tier registry: %w: device %d entry", ErrCorrupt, i+1)
		}
		devs[i].Path = string(e[TDPath : TDPath+pl])
	}
	return devs, nil
}

// Device label: the first DevLabelSize bytes of a device's backing file
// (DIR/dnnfs-tier.dat), on the SSD itself. Data starts at DevDataStart.
const (
	DLMagic      = 0  // u64 DevMagic
	DLVersion    = 8  // u32 Version
	DLDev        = 12 // u32 DevID in the pool's registry
	DLPool       = 16 // [16]byte pool UUID
	DLUUID       = 32 // [16]byte device UUID (= registry entry)
	DLCRC        = 60 // u32 CRC-32C of [0, 60)
	DevLabelSize = 64
	DevDataStart = BlockSize // first byte of shard space in a backing file

	DevMagic uint64 = 0x31445353534E4E44 // "DNNSSSD1"
)

// DevLabel is a decoded device label.
type DevLabel struct {
	Dev  DevID
	Pool [16]byte
	UUID [16]byte
}

// Encode writes the label (DevLabelSize bytes).
func (l *DevLabel) Encode(b []byte) {
	b = b[:DevLabelSize]
	clear(b)
	le.PutUint64(b[DLMagic:], DevMagic)
	le.PutUint32(b[DLVersion:], Version)
	le.PutUint32(b[DLDev:], uint32(l.Dev))
	copy(b[DLPool:DLPool+16], l.Pool[:])
	copy(b[DLUUID:DLUUID+16], l.UUID[:])
	le.PutUint32(b[DLCRC:], Checksum(b[:DLCRC]))
}

// DecodeDevLabel parses a device label.
func DecodeDevLabel(b []byte) (DevLabel, error) {
	var l DevLabel
	if len(b) < DevLabelSize {
		return l, fmt.Errorf("device label: %w: short buffer", ErrCorrupt)
	}
	if le.Uint64(b[DLMagic:]) != DevMagic {
		return l, fmt.Errorf("device label: %w", ErrBadMagic)
	}
	if got, want := le.Uint32(b[DLCRC:]), Checksum(b[:DLCRC]); got != want {
		return l, fmt.Errorf("device label: %w (stored %08x, computed %08x)", ErrBadChecksum, got, want)
	}
	if v := le.Uint32(b[DLVersion:]); v != Version {
		return l, fmt.Errorf("device label: %w %d", ErrBadVersion, v)
	}
	d := le.Uint32(b[DLDev:])
	if d < 1 || d > MaxTierDevices {
		return l, fmt.Errorf("device label: %w: device id %d", ErrCorrupt, d)
	}
	l.Dev = DevID(d)
	copy(l.Pool[:], b[DLPool:DLPool+16])
	copy(l.UUID[:], b[DLUUID:DLUUID+16])
	return l, nil
}

// Element types of embedding tables.
const (
	DtypeF32  uint8 = 1
	DtypeF16  uint8 = 2
	DtypeBF16 uint8 = 3
)

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

// Table descriptor: a run of TBBlocks contiguous data blocks at the
// inode's INTable: a 64-byte header, then one 32-byte shard entry per
// shard (the translation table: rows -> device, offset). Shard i holds
// rows [i*ShardRows, min((i+1)*ShardRows, Rows)).
const (
	TBCRC       = 0  // u32 CRC-32C of header bytes [4, 64)
	TBMagic     = 4  // u32 TableMagic
	TBRows      = 8  // u64 rows
	TBDim       = 16 // u32 values per row
	TBDtype     = 20 // u8 DtypeF32/F16/BF16
	TBShardRows = 24 // u64 rows per shard (the last may hold fewer)
	TBShards    = 32 // u32 shards = ceil(rows / shard rows)
	TBBlocks    = 36 // u32 blocks of the descriptor
	TBHeader    = 64 // first shard entry

	ShardEntrySize = 32
	SEDev          = 0  // u16 DevID of the primary copy
	SERDev         = 2  // u16 DevID of the replica, 0 = none
	SEGen          = 4  // u32 times the shard moved or changed replicas
	SEOff          = 8  // u64 byte offset of the primary copy in its backing file
	SEROff         = 16 // u64 byte offset of the replica, 0 = none
	SECRC          = 28 // u32 CRC-32C of entry bytes [0, 28)

	TableMagic     uint32 = 0x42544E44 // "DNTB"
	MaxTableShards        = 1 << 20
	MaxTableDim           = 1 << 16
	MaxTableRows          = 1 << 40
	MaxTableBytes         = 1 << 50
)

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
		return h, fmt.Errorf("table descriptor: %w: short buffer", ErrCorrupt)
	}
	if got, want := le.Uint32(b[TBCRC:]), Checksum(b[4:TBHeader]); got != want {
		return h, fmt.Errorf("table descriptor: %w (stored %08x, computed %08x)", ErrBadChecksum, got, want)
	}
	if le.Uint32(b[TBMagic:]) != TableMagic {
		return h, fmt.Errorf("table descriptor: %w: bad magic", ErrCorrupt)
	}
	want, err := NewTableHeader(le.Uint64(b[TBRows:]), le.Uint32(b[TBDim:]), b[TBDtype], le.Uint64(b[TBShardRows:]))
	if err != nil {
		return h, fmt.Errorf("table descriptor: %w: %v", ErrCorrupt, err)
	}
	h = want
	h.Shards, h.Blocks = le.Uint32(b[TBShards:]), le.Uint32(b[TBBlocks:])
	if h != want {
		return h, fmt.Errorf("table descriptor: %w: %d shards in %d blocks, want %d in %d", ErrCorrupt, h.Shards, h.Blocks, want.Shards, want.Blocks)
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
		return e, fmt.Errorf("shard entry: %w: short buffer", ErrCorrupt)
	}
	if got, want := le.Uint32(b[SECRC:]), Checksum(b[:SECRC]); got != want {
		return e, fmt.Errorf("shard entry: %w (stored %08x, computed %08x)", ErrBadChecksum, got, want)
	}
	e.Dev, e.RDev = DevID(le.Uint16(b[SEDev:])), DevID(le.Uint16(b[SERDev:]))
	e.Gen = le.Uint32(b[SEGen:])
	e.Off, e.ROff = le.Uint64(b[SEOff:]), le.Uint64(b[SEROff:])
	switch {
	case e.Dev < 1 || int(e.Dev) > ndev:
		return e, fmt.Errorf("shard entry: %w: device %d (%d registered)", ErrCorrupt, e.Dev, ndev)
	case e.Off < DevDataStart || e.Off%BlockSize != 0 || e.Off > MaxTableBytes:
		return e, fmt.Errorf("shard entry: %w: offset %d", ErrCorrupt, e.Off)
	case e.RDev == 0 && e.ROff != 0:
		return e, fmt.Errorf("shard entry: %w: replica offset %d without a device", ErrCorrupt, e.ROff)
	case e.RDev != 0 && (int(e.RDev) > ndev || e.RDev == e.Dev || e.ROff < DevDataStart || e.ROff%BlockSize != 0 || e.ROff > MaxTableBytes):
		return e, fmt.Errorf("shard entry: %w: replica on device %d at %d", ErrCorrupt, e.RDev, e.ROff)
	}
	return e, nil
}
