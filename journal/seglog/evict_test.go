package seglog_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal/seglog"
	"github.com/dnnfs/dnnfs/pmem"
)

// Crash images with early evictions (pmem.Recorder.Crashes): between two
// fences any line stored or flushed since may already be on media. A
// Tail_ptr must still never run ahead of durable data, nor go back behind
// a tail whose MoveTail returned (DESIGN §Two-layer log).

const (
	evictSubsets = 24 // eviction images per crash point
	evictSeed    = 0x7365676c
	evictSegLen  = 16 * bs
)

// tailRun is a write session of two segments whose tails move over data
// written in chunks, some ahead of the tail, on a store-tracking Recorder
// seen through wrap (nil: directly).
type tailRun struct {
	p     pool
	rec   *pmem.Recorder
	l     *seglog.Log
	data  int64       // pool offset of the file's byte 0
	src   []byte      // what the job writes
	fence []int       // fence count when each move returned; fence[0]: Create
	tails [][2]uint64 // tails persisted when each move returned
}

func newTailRun(t *testing.T, wrap func(pmem.Medium) pmem.Medium) *tailRun {
	t.Helper()
	base := newPool(t, pmem.NewMemory(format.MinPoolSize), 2)
	rec := pmem.NewTrackingRecorder(base.m.Bytes())
	var m pmem.Medium = rec
	if wrap != nil {
		m = wrap(rec)
	}
	r := &tailRun{p: *base, rec: rec}
	r.p.m = m
	segs := mustSplit(t, 2*evictSegLen, 2)
	l, err := seglog.Create(m, r.p.lay, segs, 2*evictSegLen, format.SessionWrite)
	if err != nil {
		t.Fatal(err)
	}
	r.l = l
	r.data = int64(r.p.lay.Header.PLog.Off()) + int64(r.p.lay.Header.PBlocks)*bs
	r.src = make([]byte, 2*evictSegLen)
	for i := range r.src {
		r.src[i] = byte(i*7 + 1) // never zero: zeros would hide lost data
	}
	r.fence = []int{rec.Fences()}
	r.tails = [][2]uint64{{segs[0].Start, segs[1].Start}}
	return r
}

// write stores the job's bytes [off, off+n) of the file (no flush).
func (r *tailRun) write(off, n uint64) {
	copy(r.rec.Bytes()[r.data+int64(off):], r.src[off:off+n])
}

// move moves segment i's tail from where it is to tail over the data.
func (r *tailRun) move(t *testing.T, i int, tail uint64) {
	t.Helper()
	last := r.tails[len(r.tails)-1]
	from := last[i]
	if err := r.l.MoveTail(i, tail, []seglog.Span{{Off: r.data + int64(from), Len: int64(tail - from)}}); err != nil {
		t.Fatal(err)
	}
	last[i] = tail
	r.tails = append(r.tails, last)
	r.fence = append(r.fence, r.rec.Fences())
}

// script: segment 0 in order, segment 1 with a chunk written ahead of its
// tail, tails moving by one or several chunks.
func (r *tailRun) script(t *testing.T) {
	const c = 2 * bs
	s1 := uint64(evictSegLen)
	r.write(0, c)
	r.write(s1+c, c) // ahead of segment 1's tail
	r.move(t, 0, c)
	r.write(c, c)
	r.write(s1, c)
	r.move(t, 1, s1+2*c)
	r.write(2*c, 3*c)
	r.move(t, 0, 5*c)
	r.write(s1+2*c, 6*c)
	r.move(t, 1, s1+5*c)
	r.move(t, 1, s1+8*c) // to the segment's end
	r.write(5*c, 3*c)
	r.move(t, 0, 8*c)
}

// check reads the log from img: each tail within its segment, not behind
// what had returned before the crash (min), and the data below it the
// job's.
func (r *tailRun) check(img []byte, min [2]uint64) error {
	st, err := seglog.Read(seglog.Mapped(&r.p.sb, img), r.l.Fields())
	if err != nil {
		return fmt.Errorf("Read: %v", err)
	}
	for i, g := range st.Segments {
		switch {
		case g.Tail < min[i]:
			return fmt.Errorf("segment %d: tail %d went back behind the persisted %d", i, g.Tail, min[i])
		case g.Tail > g.End:
			return fmt.Errorf("segment %d: tail %d past the end %d", i, g.Tail, g.End)
		}
		got := img[r.data+int64(g.Start) : r.data+int64(g.Tail)]
		if !bytes.Equal(got, r.src[g.Start:g.Tail]) {
			return fmt.Errorf("segment %d: tail %d covers data that is not on media", i, g.Tail)
		}
	}
	return nil
}

// sweep checks every crash point from Create's return on: with subsets 0
// the fence-only images, else that many eviction images per crash point.
func (r *tailRun) sweep(subsets int) (int, []error) {
	c := r.rec.Crashes(r.fence[0], evictSeed)
	defer c.Close()
	return c.Sweep(subsets, func(k, _ int, img []byte) error {
		m := 0 // moves returned by fence k
		for m+1 < len(r.fence) && r.fence[m+1] <= k {
			m++
		}
		return r.check(img, r.tails[m])
	})
}

func TestTailEvictions(t *testing.T) {
	r := newTailRun(t, nil)
	r.script(t)
	for _, subsets := range []int{0, evictSubsets} {
		n, fails := r.sweep(subsets)
		for _, f := range fails {
			t.Error(f)
		}
		t.Logf("%d fences, %d subsets per crash point: %d crash images checked", r.rec.Fences(), subsets, n)
	}
}

// noBareFence drops Fence calls (Persist still fences): MoveTail's data
// fence goes missing, so the Tail_ptr's fence is the first to cover the
// data: a wrong order.
type noBareFence struct{ pmem.Medium }

func (noBareFence) Fence() error { return nil }

// TestEvictionsCatchUnfencedData shows what the eviction images add: with
// the data fence missing, every fence-only image passes, while an image
// in which the Tail_ptr's line reached media before the data must fail.
func TestEvictionsCatchUnfencedData(t *testing.T) {
	r := newTailRun(t, func(m pmem.Medium) pmem.Medium { return noBareFence{m} })
	r.script(t)
	if n, fails := r.sweep(0); len(fails) > 0 {
		t.Fatalf("the fence-only images already fail (%d of %d), the test shows nothing: %s", len(fails), n, fails[0])
	}
	n, fails := r.sweep(evictSubsets)
	if len(fails) == 0 {
		t.Fatalf("none of %d eviction images failed with the data fence left out", n)
	}
	t.Logf("%d of %d eviction images failed, e.g. %s", len(fails), n, fails[0])
}
