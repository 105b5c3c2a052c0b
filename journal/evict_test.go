package journal_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/pmem"
)

// evictSubsets is how many eviction images each crash point gets; the
// seed is fixed, so they are the same every run.
const evictSubsets, evictSeed = 24, 0x6a6f75

// evictSpan is the data bytes the transactions write into.
const evictSpan = 64 << 10

// evictRun commits a sequence of transactions on a store-tracking
// Recorder seen through wrap (nil: directly) and returns it with the data
// region after each commit (states[0]: before the first), and the fence
// count when the journal was formatted (returned[0]) and when each commit
// returned.
func evictRun(t *testing.T, wrap func(pmem.Medium) pmem.Medium) (*pmem.Recorder, format.Superblock, [][]byte, []int) {
	t.Helper()
	rec := pmem.NewTrackingRecorder(make([]byte, format.MinPoolSize))
	var m pmem.Medium = rec
	if wrap != nil {
		m = wrap(rec)
	}
	j, sb := newJournal(t, m)
	data := sb.DataStart.Off()
	states := [][]byte{bytes.Clone(rec.Bytes()[data : data+evictSpan])}
	returned := []int{rec.Fences()} // the journal's format
	for i := 0; i < 8; i++ {
		tx := j.Begin()
		fill := func(n int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, n) }
		tx.Write(data+format.Off(8*i), fill(8))              // shares a line with the others
		tx.Write(data+format.Off(100+i*70), fill(90))        // crosses lines
		tx.Write(data+format.Off(4090+i*4096), fill(5000))   // crosses blocks
		tx.Write(data+format.Off(30000+i*9), fill(64*(i+1))) // overlaps the previous ones
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		states = append(states, bytes.Clone(rec.Bytes()[data:data+evictSpan]))
		returned = append(returned, rec.Fences())
	}
	return rec, sb, states, returned
}

// checkReplayed replays img and requires the data region to be states[i]
// or states[i+1]: i transactions had returned by the crash, the next may
// be in flight.
func checkReplayed(img []byte, sb *format.Superblock, states [][]byte, i int) error {
	m := pmem.MemoryOver(img)
	j, err := journal.Open(m, sb)
	if err != nil {
		return fmt.Errorf("journal.Open: %v", err)
	}
	if _, err := j.Replay(); err != nil {
		return fmt.Errorf("Replay: %v", err)
	}
	if j.Pending() {
		return fmt.Errorf("a transaction is still pending after Replay")
	}
	got := img[sb.DataStart.Off():][:evictSpan]
	if bytes.Equal(got, states[i]) || i+1 < len(states) && bytes.Equal(got, states[i+1]) {
		return nil
	}
	return fmt.Errorf("after replay the data is neither the state after %d commits nor the one after %d", i, i+1)
}

// evictSweep checks the crash points of evictRun: with subsets 0 the
// fence-only images, else that many eviction images per crash point. It
// returns how many images it checked and the failures.
func evictSweep(rec *pmem.Recorder, sb *format.Superblock, states [][]byte, returned []int, subsets int) (int, []error) {
	c := rec.Crashes(returned[0], evictSeed)
	defer c.Close()
	return c.Sweep(subsets, func(k, _ int, img []byte) error {
		i := 0 // commits returned by fence k
		for i+1 < len(returned) && returned[i+1] <= k {
			i++
		}
		return checkReplayed(img, sb, states, i)
	})
}

// TestCommitEvictions checks commits on crash images with early evictions
// (pmem.Recorder.Crashes): between two fences any line stored or flushed
// since may already be on media. The commit protocol must still leave
// every transaction whole or absent, and each one whose Commit returned
// whole (DESIGN §Journal).
func TestCommitEvictions(t *testing.T) {
	rec, sb, states, returned := evictRun(t, nil)
	for _, subsets := range []int{0, evictSubsets} {
		n, fails := evictSweep(rec, &sb, states, returned, subsets)
		for _, f := range fails {
			t.Error(f)
		}
		t.Logf("%d fences, %d subsets per crash point: %d crash images checked", rec.Fences(), subsets, n)
	}
}

// unfencedRecords leaves out the fence of the journal's step 1 (the
// Persist of the transaction area at off is a Flush only): a wrong order
// in which the commit word's fence is the first to cover the records.
type unfencedRecords struct {
	pmem.Medium
	off int64
}

func (u *unfencedRecords) Persist(off, n int64) error {
	if off == u.off {
		return u.Medium.Flush(off, n)
	}
	return u.Medium.Persist(off, n)
}

// TestEvictionsCatchUnfencedRecords shows what the eviction images add:
// with step 1's fence missing, every fence-only image passes (the records
// land with the commit word's fence), while an image in which the commit
// word's line reached media before the records' lines must fail.
func TestEvictionsCatchUnfencedRecords(t *testing.T) {
	sb, err := format.Geometry(format.MinPoolSize)
	if err != nil {
		t.Fatal(err)
	}
	rec, sb, states, returned := evictRun(t, func(m pmem.Medium) pmem.Medium {
		return &unfencedRecords{Medium: m, off: int64(sb.JournalStart.Off()) + format.BlockSize}
	})
	if n, fails := evictSweep(rec, &sb, states, returned, 0); len(fails) > 0 {
		t.Fatalf("the fence-only images already fail (%d of %d), the test shows nothing: %s", len(fails), n, fails[0])
	}
	n, fails := evictSweep(rec, &sb, states, returned, evictSubsets)
	if len(fails) == 0 {
		t.Fatalf("none of %d eviction images failed with the records' fence left out", n)
	}
	t.Logf("%d of %d eviction images failed, e.g. %s", len(fails), n, fails[0])
}
