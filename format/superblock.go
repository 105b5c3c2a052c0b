package format

import "fmt"

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
		return sb, fmt.Errorf("superblock: %w: short buffer", corrupt)
	}
	if le.Uint64(b[SBMagic:]) != Magic {
		return sb, fmt.Errorf("superblock: %w", badMagic)
	}
	if got, want := le.Uint32(b[SBCRC:]), Checksum(b[:SBCRC]); got != want {
		return sb, fmt.Errorf("superblock: %w (stored %08x, computed %08x)", badChecksum, got, want)
	}
	if v := le.Uint32(b[SBVersion:]); v != Version {
		return sb, fmt.Errorf("superblock: %w %d (this dnnfs reads %d)", badVersion, v, Version)
	}
	if bs := le.Uint32(b[SBBlockSize:]); bs != BlockSize {
		return sb, fmt.Errorf("superblock: %w: block size %d", corrupt, bs)
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
		return sb, fmt.Errorf("superblock: %w: %v", corrupt, err)
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
