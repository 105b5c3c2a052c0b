package format

import (
	"errors"
	"fmt"
)

// SuperblockPair is both superblock copies of a pool, decoded. Mount uses
// the primary and falls back to the replica; the checker also reports a
// bad or disagreeing copy.
type SuperblockPair struct {
	Primary, Replica       Superblock
	PrimaryErr, ReplicaErr error // why a copy does not decode, or nil
}

// DecodeSuperblockPair decodes blocks 0 and 1 of a pool's bytes b. The
// error is ErrNotPool when neither copy has the magic (or b is too short
// to hold them), and says what is wrong with each when both are bad.
func DecodeSuperblockPair(b []byte, poolSize int64) (SuperblockPair, error) {
	var p SuperblockPair
	if len(b) < 2*BlockSize {
		return p, fmt.Errorf("%w: %d bytes is smaller than a superblock pair", ErrNotPool, len(b))
	}
	p.Primary, p.PrimaryErr = DecodeSuperblock(b[SuperPrimary.Off():], poolSize)
	p.Replica, p.ReplicaErr = DecodeSuperblock(b[SuperReplica.Off():], poolSize)
	if p.PrimaryErr != nil && p.ReplicaErr != nil {
		if errors.Is(p.PrimaryErr, ErrBadMagic) && errors.Is(p.ReplicaErr, ErrBadMagic) {
			return p, ErrNotPool
		}
		return p, fmt.Errorf("both superblocks are bad: primary (block 0): %v; replica (block 1): %v", p.PrimaryErr, p.ReplicaErr)
	}
	return p, nil
}

// Use is the copy to mount from: the primary when it decodes, else the
// replica (useReplica). Valid after DecodeSuperblockPair returned nil.
func (p *SuperblockPair) Use() (sb Superblock, useReplica bool) {
	if p.PrimaryErr == nil {
		return p.Primary, false
	}
	return p.Replica, true
}

// SameGeometry reports whether two superblocks describe the same pool
// layout and identity (the fields mkfs sets and nothing changes).
func SameGeometry(a, b *Superblock) bool {
	return a.Blocks == b.Blocks && a.UUID == b.UUID && a.JournalStart == b.JournalStart &&
		a.JournalLen == b.JournalLen && a.InodeStart == b.InodeStart && a.InodeCount == b.InodeCount &&
		a.DataStart == b.DataStart && a.Created == b.Created
}
