package crashimage_test

import (
	"testing"

	"github.com/dnnfs/dnnfs/format"
)

// TestNoStaleData: blocks another file freed, reused by writes that cover
// them only in part, must read as zeros around the data after a crash
// (README "Durability contract", rule 5), and the zeros must be durable by
// the time the write returns (it extended the file or allocated blocks:
// rule 1) and certainly after fsync (rule 2).
func TestNoStaleData(t *testing.T) {
	const bs = format.BlockSize
	s := newScript(t, poolSize)
	s.create("/b", 0o644)
	s.write("/b", 0, bs, 1) // block 0 of b at pool block X
	s.create("/a", 0o644)
	s.write("/a", 0, 4*bs, 2) // X+1..X+4, no zero byte in them
	s.fsync("/a")
	s.unlink("/a")                // X+1..X+4 free again, their old bytes durable
	s.write("/b", bs+100, 100, 3) // extends into X+1: [4096, 4196) must be zeros
	s.fsync("/b")
	s.write("/b", 3*bs+50, 10, 4) // extends past a hole into X+3: [12288, 12338) zeros
	s.write("/b", 2*bs+10, 10, 5) // fills the hole with X+2, inside the file: [8192, 8202) and the rest zeros
	s.fsync("/b")
	verifyScript(t, s, nil)
}
