package seglog_test

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/journal/seglog"
	"github.com/dnnfs/dnnfs/pmem"
)

var le = binary.LittleEndian

const bs = format.BlockSize

// pool is a formatted-enough medium: a superblock geometry and a journal,
// with a session's log placed at the start of the data region.
type pool struct {
	m   pmem.Medium
	sb  format.Superblock
	j   *journal.Journal
	lay seglog.Layout
}

func newPool(t *testing.T, m pmem.Medium, n int) *pool {
	t.Helper()
	sb, err := format.Geometry(m.Size())
	if err != nil {
		t.Fatal(err)
	}
	if err := journal.Format(m, &sb); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(m, &sb)
	if err != nil {
		t.Fatal(err)
	}
	fb, _ := seglog.Blocks(n)
	return &pool{m: m, sb: sb, j: j, lay: seglog.NewLayout(sb.DataStart, sb.DataStart+format.Blk(fb), n)}
}

func (p *pool) src() seglog.Source { return seglog.Mapped(&p.sb, p.m.Bytes()) }

func mustSplit(t *testing.T, size uint64, n int) []seglog.Segment {
	t.Helper()
	segs, err := seglog.Split(size, n)
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		size uint64
		n    int
		want [][2]uint64 // nil: ErrGeometry
	}{
		{bs, 1, [][2]uint64{{0, bs}}},
		{10 * bs, 3, [][2]uint64{{0, 3 * bs}, {3 * bs, 6 * bs}, {6 * bs, 10 * bs}}},
		{4*bs + 100, 2, [][2]uint64{{0, 2 * bs}, {2 * bs, 4*bs + 100}}},
		{100, 1, nil},    // a segment is at least one whole block
		{bs + 1, 2, nil}, // two blocks, but a 4 KiB-aligned segment length of 0
		{3 * bs, 4, nil},
		{0, 1, nil},
		{bs, 0, nil},
		{2000 * bs, format.MaxThreads + 1, nil},
	} {
		segs, err := seglog.Split(tc.size, tc.n)
		if tc.want == nil {
			if !errors.Is(err, seglog.ErrGeometry) {
				t.Errorf("Split(%d, %d) = %v, %v; want ErrGeometry", tc.size, tc.n, segs, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Split(%d, %d): %v", tc.size, tc.n, err)
			continue
		}
		var got [][2]uint64
		for _, g := range segs {
			if g.Tail != g.Start || g.Done || g.Pid != 0 {
				t.Errorf("Split(%d, %d): fresh segment %+v", tc.size, tc.n, g)
			}
			got = append(got, [2]uint64{g.Start, g.End})
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Split(%d, %d) = %v, want %v", tc.size, tc.n, got, tc.want)
		}
	}
}

// TestStartReadBack: a fresh log reads back as its segments, each
// resuming at its start, and passes the checker.
func TestStartReadBack(t *testing.T) {
	p := newPool(t, pmem.NewMemory(8<<20), 3)
	segs := mustSplit(t, 10*bs, 3)
	l, err := seglog.Create(p.m, p.lay, segs, 10*bs, format.SessionWrite)
	if err != nil {
		t.Fatal(err)
	}
	f := l.Fields()
	if want := (seglog.Fields{ProcessNum: 3, FLog: p.lay.FLog, Size: 10 * bs, Mode: format.SessionWrite}); f != want {
		t.Fatalf("Fields() = %+v, want %+v", f, want)
	}
	for _, read := range []func(seglog.Source, seglog.Fields) (*seglog.State, error){seglog.Read, seglog.Check} {
		st, err := read(p.src(), f)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(st.Segments, segs) || st.Layout != p.lay || st.Size != 10*bs || st.Mode != format.SessionWrite {
			t.Fatalf("read back %+v, want segments %+v in %+v", st, segs, p.lay)
		}
	}
	// Stored into an inode and read from it, the fields are the same.
	var d format.Inode
	f.Store(&d)
	if got := seglog.FieldsOf(&d); got != f {
		t.Fatalf("FieldsOf(Store(%+v)) = %+v", f, got)
	}
}

// TestStartPersistOrder: Create's two persists; a crash after the first
// leaves the P_log durable and no F_log, after the second both.
func TestStartPersistOrder(t *testing.T) {
	base := newPool(t, pmem.NewMemory(8<<20), 2)
	r := pmem.NewRecorder(base.m.Bytes())
	p := *base
	p.m = r
	segs := mustSplit(t, 8*bs, 2)
	l, err := seglog.Create(r, p.lay, segs, 8*bs, format.SessionRead)
	if err != nil {
		t.Fatal(err)
	}
	if r.Fences() != 2 {
		t.Fatalf("Create issued %d fences, want 2 (P_log, then F_log)", r.Fences())
	}
	img1 := r.Image(1)
	if _, err := seglog.Read(seglog.Mapped(&p.sb, img1), l.Fields()); !errors.Is(err, seglog.ErrHeader) {
		t.Fatalf("after the P_log's persist only: Read = %v, want ErrHeader (no F_log yet)", err)
	}
	if got := le.Uint64(img1[p.lay.TailOff(1):]); got != segs[1].Start {
		t.Fatalf("after the P_log's persist: Tail_ptr 1 = %d, want %d", got, segs[1].Start)
	}
	if _, err := seglog.Check(seglog.Mapped(&p.sb, r.Image(2)), l.Fields()); err != nil {
		t.Fatalf("after both persists: %v", err)
	}
}

// TestTailMoves: a write session's tail move flushes and fences the data
// first, then persists the Tail_ptr; a read session's only the Tail_ptr.
func TestTailMoves(t *testing.T) {
	for _, mode := range []uint32{format.SessionWrite, format.SessionRead} {
		t.Run(seglog.ModeName(mode), func(t *testing.T) {
			base := newPool(t, pmem.NewMemory(8<<20), 2)
			r := pmem.NewRecorder(base.m.Bytes())
			p := *base
			p.m = r
			segs := mustSplit(t, 8*bs, 2)
			l, err := seglog.Create(r, p.lay, segs, 8*bs, mode)
			if err != nil {
				t.Fatal(err)
			}
			data := p.lay.Header.PLog.Off() + format.Off(p.lay.Header.PBlocks)*bs // file data lives past the logs
			copy(r.Bytes()[data:], "payload")
			before := r.Fences()
			if err := l.MoveTail(1, segs[1].Start+bs, []seglog.Span{{Off: int64(data), Len: 7}}); err != nil {
				t.Fatal(err)
			}
			fences := r.Fences() - before
			st, err := seglog.Read(seglog.Mapped(&p.sb, r.Image(r.Fences())), l.Fields())
			if err != nil {
				t.Fatal(err)
			}
			if st.Segments[1].Tail != segs[1].Start+bs || st.Segments[0].Tail != segs[0].Start {
				t.Fatalf("tails after the move: %+v", st.Segments)
			}
			if mode == format.SessionRead {
				if fences != 1 {
					t.Fatalf("a read session's tail move issued %d fences, want 1", fences)
				}
				return
			}
			if fences != 2 {
				t.Fatalf("a write session's tail move issued %d fences, want 2 (data, then Tail_ptr)", fences)
			}
			// Crash between the two: the data is durable, the tail not yet.
			mid := r.Image(before + 1)
			if string(mid[data:data+7]) != "payload" || le.Uint64(mid[p.lay.TailOff(1):]) != segs[1].Start {
				t.Fatal("after the data fence: want the data durable and the old Tail_ptr")
			}
		})
	}
}

// TestTailMoveFlushFails: a tail never passes data that is not durable.
func TestTailMoveFlushFails(t *testing.T) {
	p := newPool(t, pmem.NewMemory(8<<20), 1)
	fm := pmem.NewFaulty(p.m)
	l, err := seglog.Create(fm, p.lay, mustSplit(t, 4*bs, 1), 4*bs, format.SessionWrite)
	if err != nil {
		t.Fatal(err)
	}
	data := int64(p.lay.Header.PLog.Off()) + bs
	injected := errors.New("injected")
	fm.FailFlushRange(data, bs, injected)
	err = l.MoveTail(0, bs, []seglog.Span{{Off: data, Len: bs}})
	if !errors.Is(err, seglog.ErrNotDurable) || !errors.Is(err, injected) {
		t.Fatalf("MoveTail over undurable data = %v, want ErrNotDurable wrapping the flush error", err)
	}
	if got := le.Uint64(p.m.Bytes()[p.lay.TailOff(0):]); got != 0 {
		t.Fatalf("Tail_ptr moved to %d over data that is not durable", got)
	}
	fm.Heal()
	// The Tail_ptr's own persist failing is reported too.
	fm.FailFlushRange(int64(p.lay.TailOff(0)), 8, injected)
	if err := l.MoveTail(0, bs, nil); !errors.Is(err, seglog.ErrNotDurable) {
		t.Fatalf("MoveTail with a failing Tail_ptr persist = %v, want ErrNotDurable", err)
	}
}

// TestCreateFails: a failed persist of either region fails Create.
func TestCreateFails(t *testing.T) {
	for _, region := range []string{"P_log", "F_log"} {
		p := newPool(t, pmem.NewMemory(8<<20), 2)
		fm := pmem.NewFaulty(p.m)
		off := p.lay.FLog.Off()
		if region == "P_log" {
			off = p.lay.Header.PLog.Off()
		}
		fm.FailFlushRange(int64(off), bs, errors.New("injected"))
		if _, err := seglog.Create(fm, p.lay, mustSplit(t, 8*bs, 2), 8*bs, format.SessionWrite); !errors.Is(err, seglog.ErrNotDurable) {
			t.Errorf("Create with a failing %s persist = %v, want ErrNotDurable", region, err)
		}
	}
	p := newPool(t, pmem.NewMemory(8<<20), 2)
	if _, err := seglog.Create(p.m, p.lay, mustSplit(t, 8*bs, 1), 8*bs, format.SessionWrite); !errors.Is(err, seglog.ErrGeometry) {
		t.Errorf("Create of 1 segment in a layout of 2 = %v, want ErrGeometry", err)
	}
}

// TestEntriesAndFinish: the first thread's Pid and a segment's finish
// are journal records of its entry; a finished session's fields name no
// log.
func TestEntriesAndFinish(t *testing.T) {
	p := newPool(t, pmem.NewMemory(8<<20), 2)
	segs := mustSplit(t, 8*bs, 2)
	l, err := seglog.Create(p.m, p.lay, segs, 8*bs, format.SessionWrite)
	if err != nil {
		t.Fatal(err)
	}
	commit := func(i int, g seglog.Segment) {
		t.Helper()
		tx := p.j.Begin()
		l.StageEntry(tx, i, g)
		if tx.Size() != format.RecHeader+format.FLEntry {
			t.Fatalf("an entry update stages %d bytes, want one %d-byte record", tx.Size(), format.FLEntry)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	g0 := segs[0]
	g0.Pid = 77
	commit(0, g0)
	if err := l.MoveTail(0, g0.End, nil); err != nil {
		t.Fatal(err)
	}
	g0.Done = true
	commit(0, g0)
	st, err := seglog.Check(p.src(), l.Fields())
	if err != nil {
		t.Fatal(err)
	}
	want := []seglog.Segment{{Start: g0.Start, End: g0.End, Tail: g0.End, Pid: 77, Done: true}, segs[1]}
	if !reflect.DeepEqual(st.Segments, want) {
		t.Fatalf("read back %+v, want %+v", st.Segments, want)
	}
	// Done wins over a stale Tail_ptr: the entry is what says finished.
	le.PutUint64(p.m.Bytes()[p.lay.TailOff(0):], 0)
	if st, err := seglog.Read(p.src(), l.Fields()); err != nil || st.Segments[0].Tail != g0.End {
		t.Fatalf("a done segment with a stale Tail_ptr: %+v, %v", st, err)
	}
	fin := l.Fields().Finish()
	if fin.Open() || fin.FFlag != 1 || fin.ProcessNum != 2 || fin.Size != 8*bs {
		t.Fatalf("Finish() = %+v", fin)
	}
	if st, err := seglog.Check(p.src(), fin); st != nil || err != nil {
		t.Fatalf("Check(finished) = %+v, %v; want nothing to read and no error", st, err)
	}
	if st, err := seglog.Check(p.src(), seglog.Fields{}); st != nil || err != nil {
		t.Fatalf("Check(no session) = %+v, %v", st, err)
	}
	if _, err := seglog.Read(p.src(), fin); !errors.Is(err, seglog.ErrNoLog) {
		t.Fatalf("Read(finished) = %v, want ErrNoLog", err)
	}
	if got := l.Layout().Regions(); len(got) != 2 || got[0].Phys != p.lay.FLog || got[1].Phys != p.lay.Header.PLog ||
		got[0].Len != uint64(p.lay.Header.Blocks) || got[1].Len != uint64(p.lay.Header.PBlocks) {
		t.Fatalf("Regions() = %+v", got)
	}
}

// TestDamaged: torn or garbage logs and fields are refused with the
// sentinel that names what is wrong; Read skips the links the runtime
// never follows, Check does not.
func TestDamaged(t *testing.T) {
	type damage func(p *pool, b []byte, f *seglog.Fields)
	rewriteHeader := func(p *pool, b []byte, edit func(h *format.FLogHeader)) {
		h := p.lay.Header
		edit(&h)
		h.Encode(b[p.lay.FLog.Off():])
	}
	rewriteEntry := func(p *pool, b []byte, i int, edit func(e *format.FEntry)) {
		e, err := format.DecodeFEntry(b[p.lay.EntryOff(i):])
		if err != nil {
			panic(err)
		}
		edit(&e)
		e.Encode(b[p.lay.EntryOff(i):])
	}
	for _, tc := range []struct {
		name      string
		damage    damage
		read      error // from Read; nil: Read accepts it
		check     error // from Check
		codec     error // also wrapped, if not nil
		fieldOnly bool  // Read is not asked (the fields name no log)
	}{
		{name: "header checksum", damage: func(p *pool, b []byte, _ *seglog.Fields) { b[p.lay.FLog.Off()+format.FLCount]++ },
			read: seglog.ErrHeader, check: seglog.ErrHeader, codec: format.ErrBadChecksum},
		{name: "torn header (zero)", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			clear(b[p.lay.FLog.Off() : p.lay.FLog.Off()+format.FLHeader])
		}, read: seglog.ErrHeader, check: seglog.ErrHeader},
		{name: "header sizes", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			rewriteHeader(p, b, func(h *format.FLogHeader) { h.Blocks++ })
		}, read: seglog.ErrHeader, check: seglog.ErrHeader, codec: format.ErrCorrupt},
		{name: "entry checksum", damage: func(p *pool, b []byte, _ *seglog.Fields) { b[p.lay.EntryOff(2)+format.FEPartHead]++ },
			read: seglog.ErrEntry, check: seglog.ErrEntry, codec: format.ErrBadChecksum},
		{name: "torn entry (garbage)", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			copy(b[p.lay.EntryOff(1):p.lay.EntryOff(1)+format.FLEntry], "not an F_log entry at all, just some bytes in its place!!!!!!!!!!")
		}, read: seglog.ErrEntry, check: seglog.ErrEntry},
		{name: "P_flag 2", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			rewriteEntry(p, b, 0, func(e *format.FEntry) { e.PFlag = 2 })
		}, read: seglog.ErrEntry, check: seglog.ErrEntry, codec: format.ErrCorrupt},
		{name: "segment past the session", damage: func(_ *pool, _ []byte, f *seglog.Fields) { f.Size = 5 * bs },
			read: seglog.ErrEntry, check: seglog.ErrEntry},
		{name: "segment length overflows", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			rewriteEntry(p, b, 1, func(e *format.FEntry) { e.PLength = ^uint64(0) })
		}, read: seglog.ErrEntry, check: seglog.ErrEntry},
		{name: "Tail_ptr past its segment", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			le.PutUint64(b[p.lay.TailOff(2):], 1<<40)
		}, read: seglog.ErrTail, check: seglog.ErrTail},
		{name: "Tail_ptr before its segment", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			le.PutUint64(b[p.lay.TailOff(1):], 0)
		}, read: seglog.ErrTail, check: seglog.ErrTail},
		{name: "F_log outside the data region", damage: func(p *pool, _ []byte, f *seglog.Fields) { f.FLog = p.sb.DataStart - 1 },
			read: seglog.ErrOutOfBounds, check: seglog.ErrOutOfBounds},
		{name: "F_log past the pool", damage: func(p *pool, _ []byte, f *seglog.Fields) { f.FLog = format.Blk(p.sb.Blocks) },
			read: seglog.ErrOutOfBounds, check: seglog.ErrOutOfBounds},
		{name: "P_log past the pool", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			rewriteHeader(p, b, func(h *format.FLogHeader) { h.PLog = format.Blk(p.sb.Blocks) })
		}, read: seglog.ErrOutOfBounds, check: seglog.ErrOutOfBounds},
		{name: "P_log over the F_log", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			rewriteHeader(p, b, func(h *format.FLogHeader) { h.PLog = p.lay.FLog })
		}, read: seglog.ErrOutOfBounds, check: seglog.ErrOutOfBounds},
		{name: "Next", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			rewriteEntry(p, b, 0, func(e *format.FEntry) { e.Next += format.FLEntry })
		}, check: seglog.ErrLink},
		{name: "last Next", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			rewriteEntry(p, b, 2, func(e *format.FEntry) { e.Next = p.lay.EntryOff(0) })
		}, check: seglog.ErrLink},
		{name: "P_log_addr", damage: func(p *pool, b []byte, _ *seglog.Fields) {
			rewriteEntry(p, b, 1, func(e *format.FEntry) { e.PLogAddr = 0 })
		}, check: seglog.ErrLink},
		{name: "count against Process_num", damage: func(_ *pool, _ []byte, f *seglog.Fields) { f.ProcessNum = 2 },
			check: seglog.ErrCount},
		{name: "F_flag 2", damage: func(_ *pool, _ []byte, f *seglog.Fields) { f.FFlag = 2 }, check: seglog.ErrFields},
		{name: "mode 0", damage: func(_ *pool, _ []byte, f *seglog.Fields) { f.Mode = 0 }, check: seglog.ErrFields},
		{name: "Process_num 0", damage: func(_ *pool, _ []byte, f *seglog.Fields) { f.ProcessNum = 0 }, check: seglog.ErrFields},
		{name: "finished with an F_log", damage: func(_ *pool, _ []byte, f *seglog.Fields) { f.FFlag = 1 }, check: seglog.ErrFields},
		{name: "open without an F_log", damage: func(_ *pool, _ []byte, f *seglog.Fields) { f.FLog = 0 },
			check: seglog.ErrFields, fieldOnly: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(t, pmem.NewMemory(8<<20), 3)
			l, err := seglog.Create(p.m, p.lay, mustSplit(t, 12*bs, 3), 12*bs, format.SessionWrite)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.MoveTail(1, 5*bs, nil); err != nil {
				t.Fatal(err)
			}
			f := l.Fields()
			tc.damage(p, p.m.Bytes(), &f)
			if !tc.fieldOnly {
				_, err := seglog.Read(p.src(), f)
				switch {
				case tc.read == nil && err != nil:
					t.Errorf("Read = %v, want it accepted (Read does not follow this link)", err)
				case tc.read != nil && !errors.Is(err, tc.read):
					t.Errorf("Read = %v, want %v", err, tc.read)
				case tc.codec != nil && !errors.Is(err, tc.codec):
					t.Errorf("Read = %v, want it to wrap %v", err, tc.codec)
				}
			}
			st, err := seglog.Check(p.src(), f)
			if !errors.Is(err, tc.check) || st != nil {
				t.Errorf("Check = %+v, %v; want %v", st, err, tc.check)
			}
			if err != nil && err.Error() == "" {
				t.Error("an error with no message")
			}
		})
	}
}

func TestReport(t *testing.T) {
	r := seglog.Report{Threads: 3, Size: 30, Mode: "write", Segments: []seglog.SegmentReport{
		{Index: 0, Start: 0, Length: 10, Tail: 10, Done: true},
		{Index: 1, Start: 10, Length: 10, Tail: 14},
		{Index: 2, Start: 20, Length: 10, Tail: 30}, // reached its end, not yet marked done
	}}
	if got := r.Remaining(); got != 6 {
		t.Errorf("Remaining() = %d, want 6", got)
	}
	if got := r.Short(); len(got) != 1 || got[0].Index != 1 {
		t.Errorf("Short() = %+v, want segment 1", got)
	}
}
