package core

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dnnfs/dnnfs/format"
)

// TestWrittenExtents: the one-pass conversion of unwritten blocks agrees
// with its definition (cut the range out, clear the flag, merge back) on
// random extent lists and ranges.
func TestWrittenExtents(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 14))
	for i := range 20000 {
		var exts []format.Extent
		lg, phys := uint64(r.IntN(4)), Blk(100+r.IntN(4))
		for range r.IntN(6) {
			e := format.Extent{Logical: lg, Phys: phys, Len: uint64(1 + r.IntN(5)), Unwritten: r.IntN(2) == 0}
			exts = mergeExtents(exts, []format.Extent{e})
			lg = e.End() + uint64(r.IntN(2)) // sometimes contiguous, sometimes a hole
			phys += Blk(e.Len) + Blk(r.IntN(2))
		}
		from := uint64(r.IntN(int(lg) + 2))
		to := from + uint64(1+r.IntN(8))
		kept, cut := cutExtents(exts, from, to)
		for j := range cut {
			cut[j].Unwritten = false
		}
		want := mergeExtents(kept, cut)
		if got := writtenExtents(exts, from, to); !slices.Equal(got, want) {
			t.Fatalf("case %d: writtenExtents(%v, %d, %d) = %v, want %v", i, exts, from, to, got, want)
		}
	}
}
