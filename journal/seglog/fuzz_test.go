package seglog_test

import (
	"errors"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal/seglog"
	"github.com/dnnfs/dnnfs/pmem"
)

// fuzzBlocks is the pool of the fuzz target: block 0 stands for the
// metadata, blocks 1.. are the data region the fuzzer's bytes fill.
const fuzzBlocks = 6

// FuzzRead feeds the reader arbitrary log bytes and session fields: it
// must never panic or read outside the regions it validated, and what it
// accepts must be a usable set of resume points.
func FuzzRead(f *testing.F) {
	// Seeds: real logs (fresh; tails moved; a segment done) and garbage.
	for _, n := range []int{1, 3, 70} {
		m := pmem.NewMemory(fuzzBlocks * bs)
		fb, _ := seglog.Blocks(n)
		lay := seglog.NewLayout(1, format.Blk(1+fb), n)
		size := uint64(n) * 3 * bs
		segs, err := seglog.Split(size, n)
		if err != nil {
			f.Fatal(err)
		}
		l, err := seglog.Create(m, lay, segs, size, format.SessionWrite)
		if err != nil {
			f.Fatal(err)
		}
		fl := l.Fields()
		f.Add(trimZeros(m.Bytes()[bs:]), uint64(fl.FLog), fl.Size, fl.ProcessNum, fl.FFlag, fl.Mode)
		if err := l.MoveTail(n-1, segs[n-1].Start+bs, nil); err != nil {
			f.Fatal(err)
		}
		g := segs[0]
		g.Done = true
		e := lay.Entry(0, g)
		e.Encode(m.Bytes()[lay.EntryOff(0):])
		f.Add(trimZeros(m.Bytes()[bs:]), uint64(fl.FLog), fl.Size, fl.ProcessNum, fl.FFlag, fl.Mode)
	}
	f.Add([]byte{}, uint64(1), uint64(4*bs), uint32(1), uint32(0), format.SessionRead)
	f.Add([]byte("garbage"), uint64(2), uint64(0), uint32(0), uint32(1), uint32(9))

	f.Fuzz(func(t *testing.T, data []byte, flog, size uint64, procs, fflag, mode uint32) {
		pool := make([]byte, fuzzBlocks*bs)
		copy(pool[bs:], data)
		sb := format.Superblock{DataStart: 1, Blocks: fuzzBlocks}
		src := seglog.Mapped(&sb, pool)
		fields := seglog.Fields{ProcessNum: procs, FFlag: fflag, FLog: format.Blk(flog), Size: size, Mode: mode}

		st, rerr := seglog.Read(src, fields)
		cst, cerr := seglog.Check(src, fields)
		if rerr != nil {
			if st != nil {
				t.Fatalf("Read failed (%v) and returned a state", rerr)
			}
			if rerr.Error() == "" {
				t.Fatal("an error with no message")
			}
			for _, s := range []error{seglog.ErrNoLog, seglog.ErrOutOfBounds, seglog.ErrHeader, seglog.ErrEntry, seglog.ErrTail} {
				if errors.Is(rerr, s) {
					goto known
				}
			}
			t.Fatalf("Read = %v: no sentinel of the reader", rerr)
		known:
			if cerr == nil && cst != nil {
				t.Fatalf("Check accepted a log Read refuses (%v)", rerr)
			}
			return
		}
		// Read accepted: resume points a job can use.
		if st.Layout.Count() != len(st.Segments) || len(st.Segments) < 1 || len(st.Segments) > format.MaxThreads {
			t.Fatalf("%d segments for a count of %d", len(st.Segments), st.Layout.Count())
		}
		for i, g := range st.Segments {
			if g.Start > g.End || g.End > size || g.Tail < g.Start || g.Tail > g.End || (g.Done && g.Tail != g.End) {
				t.Fatalf("segment %d = %+v in a session of %d bytes", i, g, size)
			}
		}
		for _, r := range st.Layout.Regions() {
			if !sb.ValidData(r.Phys, r.Len) {
				t.Fatalf("region %+v outside the data region", r)
			}
		}
		if cerr == nil && cst == nil {
			t.Fatal("Check found no log where Read read one")
		}
		if cerr == nil && (len(cst.Segments) != len(st.Segments) || cst.Layout != st.Layout) {
			t.Fatalf("Check read %+v, Read %+v", cst, st)
		}
	})
}

// trimZeros drops trailing zero bytes: the target pads its pool with
// zeros, and short inputs keep the fuzzer's minimization fast.
func trimZeros(b []byte) []byte {
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return append([]byte(nil), b[:n]...)
}
