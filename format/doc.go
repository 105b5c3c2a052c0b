// Package format defines the on-media layout of a dnnfs pool: every
// constant, offset and codec lives here, and FORMAT.md documents the same
// numbers (format_test.go checks that the two agree).
//
// All fields are little-endian at fixed offsets. Structures refer to each
// other by block number (Blk) or inode number (Ino), never by pointer.
// Every metadata structure carries a CRC-32C (Castagnoli) of its bytes; a
// structure whose bytes are all zero is "free" and has no checksum.
//
// Region map (block = 4096 bytes):
//
//	block            contents
//	0                superblock (primary)
//	1                superblock (replica)
//	2 .. 2+J-1       metadata journal (J blocks)
//	I .. I+T-1       inode table (T blocks, 16 inodes of 256 bytes each)
//	D .. N-1         data region: file data, directory blocks, extent
//	                 overflow blocks, xattr regions, symlink target blocks,
//	                 session F_log and P_log regions, the SSD-tier registry
//	                 block, table descriptors
//
// (FORMAT.md "Region map"; format_test.go checks that this list names every
// kind it does.) Outside the pool, each SSD-tier device's backing file
// starts with a device label.
//
// Where in the code: consts.go holds every on-media constant; the codecs
// are in a file per structure: superblock.go (and pair.go, both copies),
// tx.go (journal transactions), inode.go, extents.go (an extent, the
// overflow block, an inode's extent list), dirent.go, xattr.go,
// session.go (F_log), tier.go (registry, device label) and table.go
// (table descriptor, shard entries); errors.go has the sentinel errors.
//
// Free space is not stored: it is rebuilt at every mount from the extents
// and block pointers of live inodes, so it can never disagree with them.
//
// What it owns: every on-media constant, offset and codec (encode, decode,
// checksum), used alike by the runtime (core, journal, journal/seglog,
// embedding) and the checker (recovery), so a structure has one codec.
//
// What it must not do: import anything of dnnfs, do I/O, or hold state:
// it turns bytes into values and back, nothing else.
package format
