package format

// Every on-media constant of a pool, by structure, in FORMAT.md's order;
// FORMAT.md documents the same numbers and format_test.go checks that the
// two agree. The codecs that use them live in a file per structure.

// Geometry and identity constants.
//
// These values are on media: never change them; add new ones.
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

// ---------------------------------------------------------------------
// Superblock

// Superblock field offsets (FORMAT.md "Superblock").
//
// These values are on media: never change them; add new ones.
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
//
// These values are on media: never change them; add new ones.
const (
	StateClean   uint64 = 0 // unmounted cleanly: journal empty, no orphans
	StateMounted uint64 = 1 // a daemon has it (or crashed with it)
)

// InodesPerBlock is how many inode slots fit in a block.
//
// These values are on media: never change them; add new ones.
const InodesPerBlock = BlockSize / InodeSize

// ---------------------------------------------------------------------
// Journal

// Journal header (first bytes of block JournalStart) and transaction
// layout (from block JournalStart+1). See FORMAT.md "Metadata journal".
//
// These values are on media: never change them; add new ones.
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
//
// These values are on media: never change them; add new ones.
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
//
// These values are on media: never change them; add new ones.
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
//
// These values are on media: never change them; add new ones.
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

// ExtentUnwritten is the unwritten flag in an extent's len field.
//
// These values are on media: never change them; add new ones.
const ExtentUnwritten uint64 = 1 << 63

// Extent field offsets within its 24 bytes.
//
// These values are on media: never change them; add new ones.
const (
	EXLogical = 0
	EXPhys    = 8
	EXLen     = 16
)

// ---------------------------------------------------------------------
// Extent overflow block

// Overflow block layout (FORMAT.md "Extent overflow block").
//
// These values are on media: never change them; add new ones.
const (
	OVCRC        = 0  // u32 CRC-32C of [4, 4096)
	OVCount      = 4  // u32 extents in this block
	OVNext       = 8  // u64 Blk of the next overflow block, 0 = last
	OVExtents    = 16 // OverflowSlots x ExtentSize
	OverflowSlot = (BlockSize - OVExtents) / ExtentSize
)

// ---------------------------------------------------------------------
// Directory blocks

// A directory's data is a sequence of blocks of fixed-size entry slots.
// Slot i of the directory is in block i/DirentsPerBlock. A slot whose bytes
// are all zero is free. See FORMAT.md "Directory entry".
//
// These values are on media: never change them; add new ones.
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
//
// These values are on media: never change them; add new ones.
const (
	DTFifo uint8 = 1
	DTChr  uint8 = 2
	DTDir  uint8 = 4
	DTBlk  uint8 = 6
	DTReg  uint8 = 8
	DTLnk  uint8 = 10
	DTSock uint8 = 12
)

// ---------------------------------------------------------------------
// Xattr block

// An inode's extended attributes live packed in one region of XABlocks
// contiguous blocks (1..XAMaxBlocks). See FORMAT.md "Xattr region".
//
// These values are on media: never change them; add new ones.
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

// ---------------------------------------------------------------------
// Segmented-I/O session (DESIGN.md §Two-layer log)

// Session fields in the inode's reserved area (FORMAT.md "Inode").
//
// These values are on media: never change them; add new ones.
const (
	INProcessNum  = 184 // u32 Process_num: segments (= threads) of the session; 0 = none
	INFFlag       = 188 // u32 F_flag: 0 = file access not finished, 1 = finished
	INFLogAddr    = 192 // u64 F_log_addr: Blk of the F_log, 0 = NULL (no open session)
	INSessionSize = 200 // u64 bytes the session covers
	INSessionMode = 208 // u32 SessionWrite or SessionRead
)

// Session modes.
//
// These values are on media: never change them; add new ones.
const (
	SessionWrite uint32 = 1
	SessionRead  uint32 = 2
)

// F_log layout: a header, then one 64-byte entry per segment, each on its
// own cache line with its own checksum, so finishing a segment rewrites
// one entry. See FORMAT.md "F_log".
//
// These values are on media: never change them; add new ones.
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

// ---------------------------------------------------------------------
// SSD tier: device registry, device label, embedding-table descriptor
// (DESIGN.md §Embedding tier; FORMAT.md "SSD tier").

// INTable is the inode field naming an embedding table's descriptor.
//
// These values are on media: never change them; add new ones.
const INTable = 248 // u64 Blk of the table descriptor (InodeTable set), else 0

// Tier registry block: one block at Superblock.Tier listing the devices.
//
// These values are on media: never change them; add new ones.
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

// Device label: the first DevLabelSize bytes of a device's backing file
// (DIR/dnnfs-tier.dat), on the SSD itself. Data starts at DevDataStart.
//
// These values are on media: never change them; add new ones.
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

// Element types of embedding tables.
//
// These values are on media: never change them; add new ones.
const (
	DtypeF32  uint8 = 1
	DtypeF16  uint8 = 2
	DtypeBF16 uint8 = 3
)

// Table descriptor: a run of TBBlocks contiguous data blocks at the
// inode's INTable: a 64-byte header, then one 32-byte shard entry per
// shard (the translation table: rows -> device, offset). Shard i holds
// rows [i*ShardRows, min((i+1)*ShardRows, Rows)).
//
// These values are on media: never change them; add new ones.
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
