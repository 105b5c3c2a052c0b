package alloc

import (
	"testing"

	"github.com/dnnfs/dnnfs/format"
)

func TestMarkReleaseCounts(t *testing.T) {
	a := New(10, 110) // 100 blocks, the last word partly past the end
	if a.Free() != 100 || a.Used() != 0 {
		t.Fatalf("fresh map: free %d used %d", a.Free(), a.Used())
	}
	if !a.MarkUsed(10, 5) || !a.MarkUsed(100, 10) {
		t.Fatal("marking free blocks failed")
	}
	if a.MarkUsed(14, 2) {
		t.Fatal("marking block 14 twice succeeded")
	}
	if a.MarkUsed(105, 6) || a.MarkUsed(9, 1) {
		t.Fatal("marking outside the map succeeded")
	}
	if got := a.Used(); got != 16 {
		t.Fatalf("used %d, want 16", got)
	}
	if !a.IsUsed(15) || a.IsUsed(16) || !a.IsUsed(9) || !a.IsUsed(110) {
		t.Fatal("IsUsed wrong")
	}
	a.Release(10, 6)
	a.Release(10, 6) // twice: no double count
	if got := a.Used(); got != 10 {
		t.Fatalf("used %d after release, want 10", got)
	}
}

func TestAllocPolicy(t *testing.T) {
	a := New(0, 1000)
	b, n := a.Alloc(100, 50)
	if b != 100 || n != 50 {
		t.Fatalf("goal: got %d+%d", b, n)
	}
	// The goal is taken: next fit after the cursor.
	b, n = a.Alloc(100, 10)
	if b != 150 || n != 10 {
		t.Fatalf("next fit: got %d+%d", b, n)
	}
	if _, ok := a.AllocContig(0, 2000); ok {
		t.Fatal("contiguous run larger than the map")
	}
	c, ok := a.AllocContig(0, 100)
	if !ok || c != 0 {
		t.Fatalf("contiguous at goal 0: %d %v", c, ok)
	}
	runs := a.AllocRuns(0, a.Free())
	var got uint64
	for _, r := range runs {
		got += r.Len
	}
	if got != 1000-160 || a.Free() != 0 {
		t.Fatalf("runs took %d, free %d", got, a.Free())
	}
	if a.AllocRuns(0, 1) != nil {
		t.Fatal("allocating from a full map succeeded")
	}
	if b, n := a.Alloc(0, 1); n != 0 {
		t.Fatalf("full map gave %d+%d", b, n)
	}
}

func TestAllocRunsReleasesOnFailure(t *testing.T) {
	a := New(0, 64)
	a.MarkUsed(10, 1)
	if a.AllocRuns(0, 64) != nil {
		t.Fatal("took more blocks than are free")
	}
	if a.Free() != 63 {
		t.Fatalf("free %d after a failed AllocRuns, want 63", a.Free())
	}
}

// FuzzAlloc drives the map with random operations and checks it against a
// plain set of used blocks.
func FuzzAlloc(f *testing.F) {
	f.Add(uint16(5), uint16(200), []byte{0, 10, 5, 1, 3, 40, 2, 0, 7, 3, 12, 2})
	f.Fuzz(func(t *testing.T, start, total uint16, ops []byte) {
		if total <= start || total-start > 4096 {
			return
		}
		a := New(format.Blk(start), uint64(total))
		used := map[format.Blk]bool{}
		take := func(b format.Blk, n uint64) {
			for k := format.Blk(0); k < format.Blk(n); k++ {
				if used[b+k] || b+k < format.Blk(start) || uint64(b+k) >= uint64(total) {
					t.Fatalf("allocated block %d is used or outside [%d, %d)", b+k, start, total)
				}
				used[b+k] = true
			}
		}
		for len(ops) >= 3 {
			op, x, y := ops[0]%5, format.Blk(start)+format.Blk(ops[1]), uint64(ops[2])
			ops = ops[3:]
			switch op {
			case 0:
				b, n := a.Alloc(x, y)
				if n > y {
					t.Fatalf("Alloc(%d, %d) gave %d blocks", x, y, n)
				}
				take(b, n)
			case 1:
				if b, ok := a.AllocContig(x, y); ok {
					take(b, y)
				}
			case 2:
				for _, r := range a.AllocRuns(x, y) {
					take(r.Phys, r.Len)
				}
			case 3:
				a.Release(x, y)
				for k := format.Blk(0); uint64(x)+y <= uint64(total) && k < format.Blk(y); k++ {
					delete(used, x+k)
				}
			case 4:
				ok := a.MarkUsed(x, y)
				free := uint64(x)+y <= uint64(total)
				for k := format.Blk(0); free && k < format.Blk(y); k++ {
					free = !used[x+k]
				}
				if ok != free {
					t.Fatalf("MarkUsed(%d, %d) = %v, want %v", x, y, ok, free)
				}
				if uint64(x)+y <= uint64(total) {
					for k := format.Blk(0); k < format.Blk(y); k++ {
						used[x+k] = true
					}
				}
			}
			if got := a.Used(); got != uint64(len(used)) {
				t.Fatalf("map says %d used, the set %d", got, len(used))
			}
		}
	})
}
