package alloc

import (
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

// noGoal is outside every map here: an allocation with no goal.
const noGoal = format.Blk(1 << 30)

// TestWarmPreferred: with the goal taken, Alloc takes warm blocks before
// blocks never used (past the cursor), as one long run.
func TestWarmPreferred(t *testing.T) {
	a := New(0, 4096)
	old := a.AllocRuns(noGoal, 1000) // an old file: blocks 0..999
	if len(old) != 1 || old[0].Phys != 0 {
		t.Fatalf("old file: %v", old)
	}
	a.Alloc(noGoal, 10) // something else past it: blocks 1000..1009
	t0 := time.Unix(100, 0)
	a.ReleaseWarm(0, 1000, t0)
	if a.Warm() != 1000 || a.Free() != 4096-10 {
		t.Fatalf("warm %d free %d", a.Warm(), a.Free())
	}
	// A fresh file (no goal): the warm run, not the cursor's 1010.
	b, n := a.Alloc(noGoal, 600)
	if b != 0 || n != 600 {
		t.Fatalf("fresh file took %d+%d, want the warm 0+600", b, n)
	}
	if a.Warm() != 400 {
		t.Fatalf("warm %d after taking 600, want 400", a.Warm())
	}
	// Goal-based: a free goal is still taken as before, warm or not.
	if b, n := a.Alloc(2000, 5); b != 2000 || n != 5 {
		t.Fatalf("goal 2000: got %d+%d", b, n)
	}
	// Goal taken: the rest of the warm run.
	if b, n := a.Alloc(2000, 400); b != 600 || n != 400 {
		t.Fatalf("goal taken: got %d+%d, want the warm 600+400", b, n)
	}
	if a.Warm() != 0 {
		t.Fatalf("warm %d, want 0", a.Warm())
	}
	// No warm blocks left: next fit after the cursor, as before.
	if b, _ := a.Alloc(noGoal, 10); b != 1000+10 && b != 2005 {
		t.Fatalf("cold next fit took %d", b)
	}
}

// TestWarmShortRunsLast: warm blocks in runs shorter than the request
// lose to a long cold run (extents stay long), but are taken before the
// map reports full.
func TestWarmShortRunsLast(t *testing.T) {
	a := New(0, 1024)
	a.AllocRuns(noGoal, 512)
	for b := format.Blk(0); b < 512; b += 64 {
		a.ReleaseWarm(b, 8, time.Unix(1, 0))
	}
	if b, n := a.Alloc(noGoal, 256); b != 512 || n != 256 {
		t.Fatalf("long request: got %d+%d, want the cold 512+256", b, n)
	}
	a.AllocRuns(noGoal, 256) // the rest of the cold space
	if b, n := a.Alloc(noGoal, 256); b%64 != 0 || n != 8 {
		t.Fatalf("only short warm runs left: got %d+%d", b, n)
	}
}

// TestTakeWarm: the cap takes the oldest releases first, the decay takes
// those released before the cut-off, the claimed blocks count free but
// are not allocated until returned, and then they are cold.
func TestTakeWarm(t *testing.T) {
	a := New(0, 1000)
	a.AllocRuns(noGoal, 600)
	t1, t2, t3 := time.Unix(1, 0), time.Unix(2, 0), time.Unix(3, 0)
	a.ReleaseWarm(0, 100, t1)
	a.ReleaseWarm(200, 100, t2)
	a.ReleaseWarm(400, 100, t3)
	if got := a.TakeWarm(time.Time{}, 300, 1000); got != nil {
		t.Fatalf("at the cap: took %v", got)
	}
	// Over a cap of 250: the oldest 50 blocks.
	got := a.TakeWarm(time.Time{}, 250, 1000)
	if len(got) != 1 || got[0].Phys != 0 || got[0].Len != 50 {
		t.Fatalf("cap 250: took %v, want 0+50", got)
	}
	if a.Warm() != 250 || a.Free() != 400+300 {
		t.Fatalf("after claiming: warm %d free %d", a.Warm(), a.Free())
	}
	if a.IsUsed(10) != true {
		t.Fatal("a claimed block is allocatable")
	}
	a.ReturnPunched(got)
	if a.Warm() != 250 || a.Free() != 700 || a.IsUsed(10) {
		t.Fatalf("after return: warm %d free %d used(10) %v", a.Warm(), a.Free(), a.IsUsed(10))
	}
	// Decay: released before t3, at most 60 blocks a call.
	var all []format.Extent
	for {
		got := a.TakeWarm(t3, ^uint64(0), 60)
		if got == nil {
			break
		}
		var n uint64
		for _, r := range got {
			n += r.Len
		}
		if n > 60 {
			t.Fatalf("took %d blocks, max 60", n)
		}
		all = append(all, got...)
		a.ReturnPunched(got)
	}
	var n uint64
	for _, r := range all {
		if r.Phys >= 400 {
			t.Fatalf("decay took %v, released at t3", r)
		}
		n += r.Len
	}
	if n != 150 || a.Warm() != 100 {
		t.Fatalf("decay took %d blocks, warm %d; want 150 and 100", n, a.Warm())
	}
	// Allocated warm blocks are not taken later.
	a.Alloc(noGoal, 100) // the warm 400..499
	if got := a.TakeWarm(time.Unix(10, 0), 0, 1000); got != nil {
		t.Fatalf("allocated warm blocks taken: %v", got)
	}
}

// TestAllocWaitsForPunch: when only claimed blocks are free, an
// allocation waits for them instead of reporting the map full.
func TestAllocWaitsForPunch(t *testing.T) {
	a := New(0, 64)
	a.AllocRuns(noGoal, 64)
	a.ReleaseWarm(0, 64, time.Unix(1, 0))
	got := a.TakeWarm(time.Time{}, 0, 64)
	if len(got) != 1 || got[0].Len != 64 || a.Free() != 64 {
		t.Fatalf("claimed %v, free %d", got, a.Free())
	}
	done := make(chan uint64)
	go func() {
		_, n := a.Alloc(noGoal, 64)
		done <- n
	}()
	a.ReturnPunched(got)
	if n := <-done; n != 64 {
		t.Fatalf("allocation after the punch took %d, want 64", n)
	}
}
