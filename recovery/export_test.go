package recovery

import (
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

// The tests live in package recovery_test (they drive package core, which
// imports recovery); these expose what they look at inside the checker.

// MaxFileBlocks is the checker's bound on file block numbers.
const MaxFileBlocks = maxFileBlocks

// Claim is a run of data blocks the checker gave an owner.
type Claim struct {
	Ino  format.Ino
	Phys format.Blk
	N    uint64
	What string
}

// Analysis is what the checker's analysis found: its report, the
// superblock it used, the block claims it made and the live inodes.
type Analysis struct {
	Rep    *Report
	SB     format.Superblock
	Claims []Claim
	Live   []Live // by inode number
}

// Live is a live inode as the checker decoded it.
type Live struct {
	Ino  format.Ino
	Off  format.Off
	D    format.Inode
	Exts []format.Extent
	Ovf  []format.Blk
}

// Analyze runs the checker's analysis (without the journal overlay when
// !overlay).
func Analyze(m pmem.Medium, overlay bool) (*Analysis, error) {
	a, err := analyze(m, overlay, nil)
	if err != nil {
		return nil, err
	}
	out := &Analysis{Rep: a.rep, SB: a.sb}
	for _, c := range a.claims {
		out.Claims = append(out.Claims, Claim{Ino: c.ino, Phys: c.phys, N: c.n, What: c.what})
	}
	for _, in := range a.order {
		out.Live = append(out.Live, Live{Ino: in.ino, Off: in.off, D: in.d, Exts: in.exts, Ovf: in.ovf})
	}
	return out, nil
}

// LookupExtent maps file block fb through a sorted extent list.
func LookupExtent(exts []format.Extent, fb uint64) (format.Blk, bool) { return lookup(exts, fb) }
