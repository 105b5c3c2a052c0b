package crashimage_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/pmem"
)

// jrec is one record of a test transaction.
type jrec struct {
	off  format.Off
	data []byte
}

// applyRecs returns base with the records stored in order (later records
// win where they overlap), as a committed transaction must leave it.
func applyRecs(base []byte, recs []jrec) []byte {
	out := bytes.Clone(base)
	for _, r := range recs {
		copy(out[r.off:], r.data)
	}
	return out
}

// journalFixture is a Recorder of size bytes with a formatted journal
// region laid out as in the smallest pool (the journal reads only the
// journal fields of the superblock; a smaller medium makes images cheaper).
func journalFixture(t *testing.T, size int) (*pmem.Recorder, format.Superblock, *journal.Journal) {
	t.Helper()
	sb, err := format.Geometry(format.MinPoolSize)
	if err != nil {
		t.Fatal(err)
	}
	rec := pmem.NewRecorder(make([]byte, size))
	journal.Format(rec, &sb)
	j, err := journal.Open(rec, &sb)
	if err != nil {
		t.Fatal(err)
	}
	return rec, sb, j
}

func commit(t *testing.T, j *journal.Journal, recs []jrec) {
	t.Helper()
	tx := j.Begin()
	for _, r := range recs {
		tx.Write(r.off, r.data)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// TestJournalCommitAtEveryFence: for one transaction, the image after each
// of its fences, once replayed, holds either every record or none; the
// switch happens once (at the commit point) and never goes back. A crash
// during the replay itself leads to the same result.
func TestJournalCommitAtEveryFence(t *testing.T) {
	const size = 2 << 20
	rec, sb, j := journalFixture(t, size)
	data := sb.DataStart.Off()
	capacity := j.Capacity()

	cases := []struct {
		name string
		recs func(round int) []jrec
	}{
		{"small records", func(round int) []jrec {
			return []jrec{
				{data + 0, pattern(uint64(round*100+1), 8)},
				{data + 9, pattern(uint64(round*100+2), 1)},                         // same cache line as the first
				{data + 61, pattern(uint64(round*100+3), 100)},                      // crosses cache lines, unaligned
				{data + 5*format.BlockSize + 4093, pattern(uint64(round*100+4), 7)}, // crosses a block
				{sb.InodeOff(7), pattern(uint64(round*100+5), format.InodeSize)},
			}
		}},
		{"overlapping records apply in order", func(round int) []jrec {
			return []jrec{
				{data + 1000, pattern(uint64(round*100+6), 3000)},
				{data + 2000, pattern(uint64(round*100+7), 50)},
				{data + 1990, pattern(uint64(round*100+8), 20)},
			}
		}},
		{"large records", func(round int) []jrec {
			return []jrec{
				{data + 64*format.BlockSize, pattern(uint64(round*100+9), 64<<10)},
				{data + 100*format.BlockSize + 3, pattern(uint64(round*100+10), 3*format.BlockSize)},
			}
		}},
		{"transaction of the journal's capacity", func(round int) []jrec {
			n := capacity - format.RecHeader
			return []jrec{{data + 7, pattern(uint64(round*100+11), n)}}
		}},
	}
	images := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Round 0 puts known "old" bytes in place; round 1 is the
			// transaction whose fences are examined.
			commit(t, j, tc.recs(0))
			// Compared: everything past the journal region (the journal's
			// own transaction area legitimately changes).
			lo := sb.InodeStart.Off()
			before := rec.Image(rec.Fences())[lo:]
			f0 := rec.Fences()
			recs := tc.recs(1)
			commit(t, j, recs)
			f1 := rec.Fences()
			after := applyRecs(rec.Image(f0), recs)[lo:]
			if f1-f0 < 4 {
				t.Errorf("commit used %d fences, the protocol has 4 persist steps", f1-f0)
			}
			committed := false
			for k := f0; k <= f1; k++ {
				img := rec.Image(k)
				state, err := replayed(t, bytes.Clone(img), &sb)
				images++
				state = state[lo:]
				if err != nil {
					t.Errorf("fence %d (of %d..%d): %v", k, f0, f1, err)
					continue
				}
				switch {
				case bytes.Equal(state, after):
					committed = true
					// A crash during the replay: replaying again from any
					// fence of the first replay gives the same bytes.
					if n := replayAgainSweep(t, img, &sb, lo, after); n >= 0 {
						images += n
					}
				case committed:
					t.Errorf("fence %d: records applied at an earlier fence but not after this one", k)
				case !bytes.Equal(state, before):
					t.Errorf("fence %d: after replay the pool holds neither the old nor the new bytes: %s",
						k, describeDiff(state, before, after))
				}
			}
			if !committed {
				t.Errorf("the transaction is not applied even at its last fence %d", f1)
			}
		})
	}
	t.Logf("%d journal crash images checked", images)
}

// replayed opens the journal of img, replays it (changing img) and returns
// the resulting bytes; a second Replay must find nothing to do.
func replayed(t *testing.T, img []byte, sb *format.Superblock) ([]byte, error) {
	m := sliceMedium(img)
	j, err := journal.Open(m, sb)
	if err != nil {
		return nil, fmt.Errorf("journal.Open: %v", err)
	}
	if _, err := j.Replay(); err != nil {
		return nil, fmt.Errorf("Replay: %v", err)
	}
	if j.Pending() {
		return nil, fmt.Errorf("a transaction is still pending after Replay")
	}
	if n, err := j.Replay(); n != 0 || err != nil {
		return nil, fmt.Errorf("second Replay: %d records, %v", n, err)
	}
	return m.Bytes(), nil
}

// replayAgainSweep replays img on a Recorder and, for each fence of that
// replay, replays the image again; every result must be want. It returns
// the number of images checked.
func replayAgainSweep(t *testing.T, img []byte, sb *format.Superblock, lo format.Off, want []byte) int {
	t.Helper()
	r := pmem.NewRecorder(img)
	j, err := journal.Open(r, sb)
	if err != nil {
		t.Errorf("journal.Open: %v", err)
		return -1
	}
	n, err := j.Replay()
	if err != nil {
		t.Errorf("Replay: %v", err)
		return -1
	}
	if n == 0 {
		return 0
	}
	checked := 0
	for k := 0; k <= r.Fences(); k++ {
		state, err := replayed(t, r.Image(k), sb)
		checked++
		if err != nil {
			t.Errorf("crash after fence %d of a replay: %v", k, err)
			continue
		}
		if !bytes.Equal(state[lo:], want) {
			t.Errorf("crash after fence %d of a replay, replayed again: %s", k, describeDiff(state[lo:], nil, want))
		}
	}
	return checked
}

// describeDiff names the first byte where got differs from old and new.
func describeDiff(got, old, new []byte) string {
	first := func(a, b []byte) int {
		for i := range a {
			if a[i] != b[i] {
				return i
			}
		}
		return -1
	}
	s := ""
	if old != nil {
		if i := first(got, old); i >= 0 {
			s += fmt.Sprintf("first difference from the old bytes at %d (got %#02x, old %#02x); ", i, got[i], old[i])
		}
	}
	if i := first(got, new); i >= 0 {
		s += fmt.Sprintf("first difference from the new bytes at %d (got %#02x, new %#02x)", i, got[i], new[i])
	}
	return s
}

// TestJournalTooLarge: a transaction larger than the journal is refused
// before anything is written.
func TestJournalTooLarge(t *testing.T) {
	rec, sb, j := journalFixture(t, 2<<20)
	f0 := rec.Fences()
	before := rec.Image(f0)
	tx := j.Begin()
	tx.Write(sb.DataStart.Off(), pattern(1, j.Capacity()-format.RecHeader+8))
	if err := tx.Commit(); !errors.Is(err, journal.ErrTooLarge) {
		t.Fatalf("Commit of %d bytes into a %d-byte journal: %v, want ErrTooLarge", tx.Size(), j.Capacity(), err)
	}
	if rec.Fences() != f0 || !bytes.Equal(rec.Bytes(), before) {
		t.Errorf("a refused transaction changed the medium (%d fences)", rec.Fences()-f0)
	}
	// The journal still works.
	commit(t, j, []jrec{{sb.DataStart.Off(), []byte("after")}})
	if state, err := replayed(t, rec.Image(rec.Fences()), &sb); err != nil || string(state[sb.DataStart.Off():][:5]) != "after" {
		t.Errorf("commit after a refused one: %v", err)
	}
}
