package format

import (
	"encoding/binary"
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

// Off returns the byte offset of block b.
func (b Blk) Off() Off { return Off(b) << BlockShift }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C used by every structure.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

var le = binary.LittleEndian

// IsZero reports whether b (an inode slot) is all zero, i.e. free.
func IsZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
