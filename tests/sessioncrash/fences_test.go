// Package sessioncrash_test tests the crash behaviour of segmented-I/O
// sessions (DESIGN.md §Two-layer log):
//
//   - TestSessionEveryFence runs sessions in process on a pmem.Recorder and
//     opens the image a crash right after every fence would leave, and
//     images of the same crash points with lines evicted early
//     (evict_test.go);
//   - TestSessionCrashResume, TestReadSessionResume and TestTailIntervalSweep
//     mount real pools, run a writer/reader process (./writer), kill -9 the
//     daemon and resume.
//
// Run with:
//
//	mkdir -p /dev/shm/dnnfs-test
//	TMPDIR=/dev/shm/dnnfs-test go test -race -count=1 ./tests/sessioncrash/
package sessioncrash_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/tests/sessioncrash/srcdata"
)

const (
	fencePool     = 32 << 20 // pool of the in-process tests
	fenceInterval = 64 << 10 // TailInterval of the in-process tests
	sessSize      = 1 << 20  // bytes a session covers
	ioChunk       = 16 << 10 // one write or read of the scripts
	blk           = format.BlockSize
)

// recoveryCheck, when package recovery is built in (recovery_test.go),
// runs recovery.Check on a raw crash image and returns the problems other
// than orphans.
var recoveryCheck func(m pmem.Medium) (problems []string, err error)

// ---------------------------------------------------------------------------
// Workers: real threads, so that Caller.TID names a live thread of this
// process (lock routing reads /proc/TID/status).

type worker struct {
	tid uint32
	ch  chan func()
}

func newWorker() *worker {
	w := &worker{ch: make(chan func())}
	ready := make(chan uint32)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		ready <- uint32(unix.Gettid())
		for f := range w.ch {
			f()
		}
	}()
	w.tid = <-ready
	return w
}

// do runs f on the worker's thread and waits for it.
func (w *worker) do(f func()) {
	done := make(chan struct{})
	w.ch <- func() { f(); close(done) }
	<-done
}

func (w *worker) caller() core.Caller { return core.Caller{TID: w.tid} }

// ---------------------------------------------------------------------------
// The script: operations on a Recorder-backed pool and, after each, the
// fence count and what the contract promises.

// gen is one session the script starts.
type gen struct {
	threads int
	size    uint64
	mode    uint32
	seed    uint64 // write: the bytes the session writes; read: the file's bytes
}

func (g gen) segs() [][2]uint64 {
	segLen := g.size / uint64(g.threads) / blk * blk
	var s [][2]uint64
	for i := 0; i < g.threads; i++ {
		end := uint64(i+1) * segLen
		if i == g.threads-1 {
			end = g.size
		}
		s = append(s, [2]uint64{uint64(i) * segLen, end})
	}
	return s
}

func (g gen) modeName() string {
	if g.mode == format.SessionRead {
		return "read"
	}
	return "write"
}

type phase int

const (
	phNone     phase = iota // no session: never started (gen -1) or abandoned
	phOpen                  // open
	phFinished              // closed as finished (F_flag = 1)
)

func (p phase) String() string { return [...]string{"no session", "open", "finished"}[p] }

// want is the state a step leaves.
type want struct {
	ph  phase
	gen int // -1: before any session (the base content)
	// tails: phOpen, the persisted tails Session() reported after the step
	// (durable: a crash may not go back behind them); phNone after an
	// abandon, the last persisted tails of the abandoned session.
	tails []uint64
}

type step struct {
	name   string
	fences int // rec.Fences() when the step returned
	w      want
}

type script struct {
	t         *testing.T
	errf      func(format string, args ...any) // where verify reports (t.Errorf)
	rec       *pmem.Recorder
	tr        *tracer // wraps rec: the pool runs on it
	p         *core.FS
	in        *core.Inode
	ino       core.Ino
	baseSize  uint64
	baseSeed  uint64
	gens      []gen
	steps     []step // steps[0]: the base content is durable
	cur       want
	done      [][]bool // per gen, per 4 KiB block of the session: completed
	workers   []*worker
	fmtFences int
}

func newSessionScript(t *testing.T, baseSize uint64, baseSeed uint64) *script {
	t.Helper()
	rec := pmem.NewTrackingRecorder(make([]byte, fencePool)) // eviction images: evict_test.go
	tr := &tracer{Medium: rec}
	if err := core.Format(tr, 0, 0); err != nil {
		t.Fatalf("Format: %v", err)
	}
	s := &script{t: t, errf: t.Errorf, rec: rec, tr: tr, fmtFences: rec.Fences(), baseSize: baseSize, baseSeed: baseSeed}
	p, _, err := core.Open(tr, core.Options{TailInterval: fenceInterval})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	s.p = p
	in, err := p.Create(p.Root(), "f", core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	s.in, s.ino = in, in.Ino
	if baseSize > 0 {
		// Allocating writes persist their data before the commit that maps it.
		for off := uint64(0); off < baseSize; off += 64 << 10 {
			n := min(64<<10, baseSize-off)
			if _, err := p.Write(in, int64(off), srcdata.Bytes(baseSeed, int64(off), int(n)), false); err != nil {
				t.Fatalf("base write: %v", err)
			}
		}
	}
	if err := p.Fsync(in); err != nil {
		t.Fatalf("Fsync: %v", err)
	}
	for i := 0; i < 4; i++ {
		s.workers = append(s.workers, newWorker())
	}
	t.Cleanup(func() {
		for _, w := range s.workers {
			close(w.ch)
		}
	})
	s.cur = want{ph: phNone, gen: -1}
	s.record("base content durable")
	return s
}

func (s *script) record(name string) {
	s.steps = append(s.steps, step{name: name, fences: s.rec.Fences(), w: s.cur})
}

// start opens a session (gen g) on the file.
func (s *script) start(g gen) {
	s.t.Helper()
	if err := s.p.StartSession(s.in, g.threads, g.size, g.mode); err != nil {
		s.t.Fatalf("StartSession(%d, %d, %s): %v", g.threads, g.size, g.modeName(), err)
	}
	s.gens = append(s.gens, g)
	s.done = append(s.done, make([]bool, (g.size+blk-1)/blk))
	gi := len(s.gens) - 1
	info, ok := s.p.Session(s.in)
	if !ok || info.Threads != g.threads || info.Size != g.size || info.Mode != g.modeName() {
		s.t.Fatalf("after StartSession: Session() = %+v, %v", info, ok)
	}
	var tails []uint64
	for i, sg := range g.segs() {
		if info.Segments[i].Start != sg[0] || info.Segments[i].Length != sg[1]-sg[0] || info.Segments[i].Tail != sg[0] {
			s.t.Fatalf("after StartSession: segment %d = %+v, want [%d, %d) with tail at its start", i, info.Segments[i], sg[0], sg[1])
		}
		tails = append(tails, sg[0])
	}
	s.cur = want{ph: phOpen, gen: gi, tails: tails}
	s.record(fmt.Sprintf("start session %d (%d threads, %s)", gi, g.threads, g.modeName()))
}

// io writes (or, in a read session, reads) [off, off+n) of the current
// session on worker w (nil: Write/Read with no caller).
func (s *script) io(w *worker, off, n uint64) {
	s.t.Helper()
	gi := s.cur.gen
	g := s.gens[gi]
	var err error
	run := func() {
		c := core.Caller{}
		if w != nil {
			c = w.caller()
		}
		if g.mode == format.SessionWrite {
			_, err = s.p.WriteAs(c, s.in, int64(off), srcdata.Bytes(g.seed, int64(off), int(n)), false)
			return
		}
		var r *core.ReadData
		if r, err = s.p.ReadAs(c, s.in, int64(off), int(n)); err != nil {
			return
		}
		got := make([]byte, 0, n)
		for _, sl := range r.Slices {
			got = append(got, sl...)
		}
		r.Done()
		if d := srcdata.FirstDiff(g.seed, int64(off), got); d >= 0 || len(got) != int(n) {
			err = fmt.Errorf("read %d bytes, first difference from the source at +%d", len(got), d)
		}
	}
	if w != nil {
		w.do(run)
	} else {
		run()
	}
	verb := map[uint32]string{format.SessionWrite: "write", format.SessionRead: "read"}[g.mode]
	name := fmt.Sprintf("%s [%d, %d) tid %d", verb, off, off+n, s.tidOf(w))
	if err != nil {
		s.t.Fatalf("%s: %v", name, err)
	}
	for b := off / blk; b < (off+n+blk-1)/blk; b++ {
		s.done[gi][b] = true
	}
	info, ok := s.p.Session(s.in)
	all := true
	for _, d := range s.done[gi] {
		all = all && d
	}
	if !ok {
		if !all {
			s.t.Fatalf("after %s: the session closed with parts not done", name)
		}
		s.cur = want{ph: phFinished, gen: gi}
		s.record(name)
		return
	}
	if info.Done {
		s.t.Fatalf("after %s: Session() reports a closed session: %+v", name, info)
	}
	// The contract after the step: the persisted tail never passes the
	// completed prefix and lags it by less than the tail interval; a
	// completed segment is finished.
	var tails []uint64
	for i, sg := range g.segs() {
		seg := info.Segments[i]
		p := s.prefix(gi, sg)
		switch {
		case seg.Tail > p:
			s.t.Fatalf("after %s: segment %d: persisted tail %d is past the completed prefix %d", name, i, seg.Tail, p)
		case p-seg.Tail >= fenceInterval:
			s.t.Fatalf("after %s: segment %d: persisted tail %d lags the completed prefix %d by %d >= the tail interval %d",
				name, i, seg.Tail, p, p-seg.Tail, fenceInterval)
		case p == sg[1] && (!seg.Done || seg.Tail != sg[1]):
			s.t.Fatalf("after %s: segment %d completed but not finished: %+v", name, i, seg)
		case seg.Done && p != sg[1]:
			s.t.Fatalf("after %s: segment %d finished before it completed: %+v", name, i, seg)
		}
		if w != nil && seg.Done && seg.Pid == 0 {
			s.t.Errorf("after %s: segment %d: no Pid recorded", name, i)
		}
		tails = append(tails, seg.Tail)
	}
	s.cur = want{ph: phOpen, gen: gi, tails: tails}
	s.record(name)
}

func (s *script) tidOf(w *worker) uint32 {
	if w == nil {
		return 0
	}
	return w.tid
}

// prefix is the end of the completed prefix of segment sg of gen gi.
func (s *script) prefix(gi int, sg [2]uint64) uint64 {
	for b := sg[0] / blk; b < sg[1]/blk; b++ {
		if !s.done[gi][b] {
			return b * blk
		}
	}
	return sg[1]
}

func (s *script) abandon() {
	s.t.Helper()
	if err := s.p.AbandonSession(s.in); err != nil {
		s.t.Fatalf("AbandonSession: %v", err)
	}
	if _, ok := s.p.Session(s.in); ok {
		s.t.Fatalf("AbandonSession: the session is still open")
	}
	s.cur = want{ph: phNone, gen: s.cur.gen, tails: s.cur.tails}
	s.record(fmt.Sprintf("abandon session %d", s.cur.gen))
}

// interleaved runs the standard pattern over the current session: segment
// 0 in order at two chunks per round, segment 1 in swapped pairs, segment
// 2 in order with its third chunk delayed, segment 3 (and any later one)
// backwards; one chunk goes through Write with no caller, and one write
// straddles the boundary of segments 1 and 2 early on.
func (s *script) interleaved() {
	g := s.gens[s.cur.gen]
	segs := g.segs()
	orders := make([][]uint64, len(segs))
	for i, sg := range segs {
		n := int((sg[1] - sg[0]) / ioChunk)
		idx := make([]int, n)
		for j := range idx {
			idx[j] = j
		}
		switch {
		case i == 0:
		case i == 1:
			for j := 0; j+1 < n; j += 2 {
				idx[j], idx[j+1] = idx[j+1], idx[j]
			}
		case i == 2 && n > 10:
			idx = append(append(append([]int{}, idx[:2]...), idx[3:10]...), append([]int{2}, idx[10:]...)...)
		default:
			for j := range idx {
				idx[j] = n - 1 - j
			}
		}
		for _, j := range idx {
			orders[i] = append(orders[i], sg[0]+uint64(j)*ioChunk)
		}
	}
	next := make([]int, len(segs))
	for round := 0; ; round++ {
		progressed := false
		for i := range segs {
			per := 1
			if i == 0 {
				per = 2
			}
			for k := 0; k < per && next[i] < len(orders[i]); k++ {
				w := s.workers[i%len(s.workers)]
				if i == 0 && next[i] == 5 {
					w = nil // Write with no caller (TID 0)
				}
				s.io(w, orders[i][next[i]], ioChunk)
				next[i]++
				progressed = true
			}
			if round == 1 && i == 1 && g.mode == format.SessionWrite && len(segs) > 2 {
				// Straddles segments 1 and 2, ahead of both tails.
				s.io(s.workers[1], segs[2][0]-ioChunk/2, ioChunk)
			}
		}
		if !progressed {
			return
		}
	}
}

// ---------------------------------------------------------------------------
// Checking every fence.

// cand is a state a crash image may show: the step that had returned
// (in flight: the next one), and the tails that are promised.
type cand struct {
	step     int
	w        want
	minTails []uint64
}

// candidates returns the states the crash image after fence k may show.
func (s *script) candidates(k int) []cand {
	lo := -1
	for j, st := range s.steps {
		if st.fences <= k {
			lo = j
		}
	}
	if lo < 0 {
		return nil // before the base content was durable
	}
	c := []cand{{step: lo, w: s.steps[lo].w, minTails: s.steps[lo].w.tails}}
	if lo+1 < len(s.steps) {
		n := s.steps[lo+1].w
		min := []uint64(nil)
		if n.ph == phOpen {
			if c[0].w.ph == phOpen && c[0].w.gen == n.gen {
				min = c[0].w.tails
			} else {
				for _, sg := range s.gens[n.gen].segs() {
					min = append(min, sg[0])
				}
			}
		}
		c = append(c, cand{step: lo + 1, w: n, minTails: min})
	}
	return c
}

// observed is what a recovered image shows.
type observed struct {
	open     bool
	info     core.SessionInfo
	d        format.Inode
	data     []byte // the file's bytes, read from the media
	openRep  int
	closeRep int
}

func (o observed) String() string {
	pn, ff, fl, sz, md := o.d.SessionFields()
	s := fmt.Sprintf("size %d, Process_num %d, F_flag %d, F_log_addr %d, session size %d mode %d", o.d.Size, pn, ff, fl, sz, md)
	if o.open {
		var t []string
		for _, sg := range o.info.Segments {
			t = append(t, fmt.Sprintf("[%d %d) tail %d done %v", sg.Start, sg.Start+sg.Length, sg.Tail, sg.Done))
		}
		s += "; open session: " + strings.Join(t, ", ")
	}
	return s
}

func observe(p *core.FS, rep *core.MountReport, ino core.Ino) (observed, error) {
	in := p.Inode(ino)
	if in == nil {
		return observed{}, fmt.Errorf("inode %d is gone", ino)
	}
	var o observed
	o.info, o.open = p.Session(in)
	o.openRep, o.closeRep = rep.SessionsOpen, rep.SessionsClosed
	var err error
	if o.d, o.data, err = fileBytes(p.Medium().Bytes(), p.Superblock(), ino); err != nil {
		return o, err
	}
	return o, nil
}

// fileBytes reads a file's bytes straight from the media (holes as zeros),
// so checking an image never goes through the read path (which would
// advance a read session).
func fileBytes(b []byte, sb format.Superblock, ino core.Ino) (format.Inode, []byte, error) {
	d, exts, err := fileExtents(b, sb, ino)
	if err != nil {
		return d, nil, err
	}
	data := make([]byte, d.Size)
	for _, e := range exts {
		lo := e.Logical * blk
		if lo >= d.Size {
			continue
		}
		n := min(e.Len*blk, d.Size-lo)
		copy(data[lo:lo+n], b[e.Phys.Off():e.Phys.Off()+format.Off(n)])
	}
	return d, data, nil
}

// fileExtents decodes a file's inode and extents from the media.
func fileExtents(b []byte, sb format.Superblock, ino core.Ino) (format.Inode, []format.Extent, error) {
	off := sb.InodeOff(ino)
	d, err := format.DecodeInode(b[off : off+format.InodeSize])
	if err != nil {
		return d, nil, err
	}
	exts := append([]format.Extent(nil), d.Inline[:min(int(d.Extents), format.InlineExtents)]...)
	for o := d.Overflow; o != 0; {
		more, next, err := format.DecodeOverflow(b[o.Off() : o.Off()+blk])
		if err != nil {
			return d, nil, err
		}
		exts = append(exts, more...)
		o = next
	}
	return d, exts, nil
}

// match checks an observed image against one candidate state.
func (s *script) match(o observed, c cand) error {
	pn, ff, flog, ssize, smode := o.d.SessionFields()
	diff := func(seed uint64, lo, hi uint64) error {
		if hi > uint64(len(o.data)) {
			return fmt.Errorf("file is %d bytes, want at least %d", len(o.data), hi)
		}
		if d := srcdata.FirstDiff(seed, int64(lo), o.data[lo:hi]); d >= 0 {
			return fmt.Errorf("byte %d differs from the source (want data of [%d, %d))", lo+uint64(d), lo, hi)
		}
		return nil
	}
	switch {
	case o.open:
		if c.w.ph != phOpen {
			return fmt.Errorf("an open session, want %s", c.w.ph)
		}
		g := s.gens[c.w.gen]
		if o.info.Threads != g.threads || o.info.Size != g.size || o.info.Mode != g.modeName() || o.info.Done {
			return fmt.Errorf("session %+v, want %d threads, %d bytes, %s", o.info, g.threads, g.size, g.modeName())
		}
		if pn != uint32(g.threads) || ff != 0 || flog == 0 || ssize != g.size || smode != g.mode {
			return fmt.Errorf("inode session fields %d %d %d %d %d for an open session", pn, ff, flog, ssize, smode)
		}
		if g.mode == format.SessionWrite && o.d.Size != g.size {
			return fmt.Errorf("file size %d, want the session's %d", o.d.Size, g.size)
		}
		if o.openRep != 1 || o.closeRep != 0 {
			return fmt.Errorf("MountReport says %d open, %d closed sessions; want 1, 0", o.openRep, o.closeRep)
		}
		for i, sg := range g.segs() {
			seg := o.info.Segments[i]
			if seg.Start != sg[0] || seg.Length != sg[1]-sg[0] {
				return fmt.Errorf("segment %d is [%d, +%d), want [%d, %d)", i, seg.Start, seg.Length, sg[0], sg[1])
			}
			if seg.Tail < sg[0] || seg.Tail > sg[1] {
				return fmt.Errorf("segment %d: tail %d outside [%d, %d]", i, seg.Tail, sg[0], sg[1])
			}
			if c.minTails != nil && seg.Tail < c.minTails[i] {
				return fmt.Errorf("segment %d: tail %d went back behind the promised (persisted) %d", i, seg.Tail, c.minTails[i])
			}
			if seg.Done && seg.Tail != sg[1] {
				return fmt.Errorf("segment %d finished with tail %d != end %d", i, seg.Tail, sg[1])
			}
			if g.mode == format.SessionWrite {
				if err := diff(g.seed, sg[0], seg.Tail); err != nil {
					return fmt.Errorf("segment %d (tail %d, done %v): %v", i, seg.Tail, seg.Done, err)
				}
			}
		}
		if g.mode == format.SessionRead {
			return diff(g.seed, 0, g.size)
		}
		return nil
	case ff == 1:
		if c.w.ph != phFinished {
			return fmt.Errorf("a session closed as finished, want %s", c.w.ph)
		}
		g := s.gens[c.w.gen]
		if pn != uint32(g.threads) || flog != 0 || ssize != g.size || smode != g.mode {
			return fmt.Errorf("inode session fields %d %d %d %d %d for a finished session", pn, ff, flog, ssize, smode)
		}
		if o.openRep != 0 {
			return fmt.Errorf("MountReport says %d open sessions", o.openRep)
		}
		if o.d.Size != g.size {
			return fmt.Errorf("file size %d, want %d", o.d.Size, g.size)
		}
		return diff(g.seed, 0, g.size)
	default:
		if pn != 0 || ff != 0 || flog != 0 || ssize != 0 || smode != 0 {
			return fmt.Errorf("no session open but the inode's session fields are %d %d %d %d %d", pn, ff, flog, ssize, smode)
		}
		if c.w.ph != phNone {
			return fmt.Errorf("no session, want %s", c.w.ph)
		}
		if o.openRep != 0 || o.closeRep != 0 {
			return fmt.Errorf("MountReport says %d open, %d closed sessions", o.openRep, o.closeRep)
		}
		if c.w.gen < 0 {
			if o.d.Size != s.baseSize {
				return fmt.Errorf("file size %d, want the old %d (StartSession is atomic)", o.d.Size, s.baseSize)
			}
			return diff(s.baseSeed, 0, s.baseSize)
		}
		g := s.gens[c.w.gen] // abandoned: what its persisted tails promised stays
		if o.d.Size != g.size && g.mode == format.SessionWrite {
			return fmt.Errorf("file size %d, want %d", o.d.Size, g.size)
		}
		if g.mode == format.SessionRead {
			return diff(g.seed, 0, g.size)
		}
		for i, sg := range g.segs() {
			if err := diff(g.seed, sg[0], c.w.tails[i]); err != nil {
				return fmt.Errorf("abandoned session, segment %d: %v", i, err)
			}
		}
		return nil
	}
}

// classify opens what Open made of an image and matches it to the
// candidates: it returns the first step whose state it shows, and every
// step it matches.
func (s *script) classify(p *core.FS, rep *core.MountReport, cands []cand) (observed, int, []int, error) {
	o, err := observe(p, rep, s.ino)
	if err != nil {
		return o, -1, nil, err
	}
	var why []string
	var matched []int
	for _, c := range cands {
		err := s.match(o, c)
		if err == nil {
			matched = append(matched, c.step)
			continue
		}
		why = append(why, fmt.Sprintf("vs. state after step %d %q (%s): %v", c.step, s.steps[c.step].name, c.w.ph, err))
	}
	if len(matched) == 0 {
		return o, -1, nil, fmt.Errorf("recovered state matches no allowed state\n    observed: %s\n    %s", o, strings.Join(why, "\n    "))
	}
	return o, matched[0], matched, nil
}

// verify checks the crash image after every fence from the first one on.
func (s *script) verify() {
	t := s.t
	n := s.tr.Fences()
	if n != s.rec.Fences() {
		t.Fatalf("the tracer counted %d fences, the Recorder %d", n, s.rec.Fences())
	}
	img, err := newMemImage(fencePool)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	rimg, err := newMemImage(fencePool) // images of a crash during recovery
	if err != nil {
		t.Fatal(err)
	}
	defer rimg.Close()
	im := &imager{img: img, fences: s.tr.fences}
	prevGen, prevOnly := -2, -1
	var prevTails []uint64
	states := map[string]int{}
	checked, deep, recFences, crossed := 0, 0, 0, 0
	for k := 0; k <= n; k++ {
		im.advance(k)
		if !raceEnabled || k == n {
			crossed++
			if !bytes.Equal(img.shared, s.rec.Image(k)) {
				t.Fatalf("fence %d: the traced image differs from Recorder.Image(%d)", k, k)
			}
		}
		cands := s.candidates(k)
		where := "before the base content was durable"
		if len(cands) > 0 {
			where = fmt.Sprintf("after step %d %q", cands[0].step, s.steps[cands[0].step].name)
			if len(cands) > 1 {
				where += fmt.Sprintf(", during step %d %q", cands[1].step, s.steps[cands[1].step].name)
			}
		}
		fail := func(format string, a ...any) {
			s.errf("crash after fence %d/%d (%s): %s", k, n, where, fmt.Sprintf(format, a...))
		}
		priv, err := img.Private()
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer unix.Munmap(priv)
			if recoveryCheck != nil && k >= s.fmtFences {
				probs, err := recoveryCheck(sliceMedium(priv))
				if err != nil {
					fail("recovery.Check: %v", err)
				} else if len(probs) > 0 {
					fail("recovery.Check found problems in the raw image:\n    %s", strings.Join(probs, "\n    "))
				}
			}
			p, rep, err := core.Open(sliceMedium(priv), core.Options{TailInterval: fenceInterval})
			if k < s.fmtFences && errors.Is(err, core.ErrNotPool) {
				return
			}
			if err != nil {
				fail("Open: %v", err)
				return
			}
			checked++
			if len(cands) == 0 {
				return // only Open must work here
			}
			o, st, matched, err := s.classify(p, rep, cands)
			if err != nil {
				fail("%v", err)
				return
			}
			// A crash image that showed the state of the step in flight
			// (and not the one before it) is followed by images that show
			// that state too: no flip back (StartSession, close and
			// abandon are atomic).
			if prevOnly >= 0 && matched[len(matched)-1] < prevOnly {
				fail("the state went back: the crash one fence earlier showed step %d's state, this one only step %d's", prevOnly, matched[len(matched)-1])
			}
			prevOnly = -1
			if matched[0] != cands[0].step {
				prevOnly = matched[0]
			}
			switch {
			case o.open:
				states["open"]++
			case s.steps[st].w.ph == phFinished:
				states["finished"]++
			default:
				states["no session"]++
			}
			if rep.SessionsClosed > 0 {
				states["closed by recovery (§1c step 6)"]++
			}
			if rep.ReplayedRecs > 0 {
				states["journal replayed"]++
			}
			// Tails never go back from one fence to the next.
			if o.open {
				g := s.steps[st].w.gen
				if g == prevGen {
					for i, sg := range o.info.Segments {
						if sg.Tail < prevTails[i] {
							fail("segment %d: tail %d is behind the %d a crash one fence earlier showed", i, sg.Tail, prevTails[i])
						}
					}
				}
				prevGen = g
				prevTails = prevTails[:0]
				for _, sg := range o.info.Segments {
					prevTails = append(prevTails, sg.Tail)
				}
			} else {
				prevGen = -2
			}
			// A crash during recovery itself (replay, §1c steps 4 and 6)
			// must lead to an allowed state too.
			if rep.ReplayedRecs > 0 || rep.SessionsClosed > 0 {
				recFences += s.crashDuringRecovery(img, rimg, cands, fail)
			}
			if !s.deepCheck(k) {
				return
			}
			deep++
			if err := s.resume(p, o, st); err != nil {
				fail("resuming on the recovered pool: %v", err)
			}
		}()
	}
	t.Logf("%d steps, %d fences (%d in Format); %d crash images opened and checked (%d compared with Recorder.Image), "+
		"%d resumed to the end, %d crashes inside recovery checked; images by state: %v", len(s.steps), n, s.fmtFences, checked, crossed, deep, recFences, states)
}

// crashDuringRecovery runs Open on the image with a tracer and checks the
// image a crash after each of Open's fences leaves. It returns how many.
func (s *script) crashDuringRecovery(img, rimg *memImage, cands []cand, fail func(string, ...any)) int {
	base, err := img.Private()
	if err != nil {
		s.t.Fatal(err)
	}
	defer unix.Munmap(base)
	tr := &tracer{Medium: sliceMedium(base)}
	if _, _, err := core.Open(tr, core.Options{TailInterval: fenceInterval}); err != nil {
		fail("Open (traced): %v", err)
		return 0
	}
	copy(rimg.shared, img.shared)
	im := &imager{img: rimg, fences: tr.fences}
	checked := 0
	for j := 1; j < tr.Fences(); j++ {
		im.advance(j)
		priv, err := rimg.Private()
		if err != nil {
			s.t.Fatal(err)
		}
		checked++
		p, rep, err := core.Open(sliceMedium(priv), core.Options{TailInterval: fenceInterval})
		if err != nil {
			fail("and again after fence %d of the recovery: Open: %v", j, err)
		} else if _, _, _, err := s.classify(p, rep, cands); err != nil {
			fail("and again after fence %d of the recovery: %v", j, err)
		}
		unix.Munmap(priv)
	}
	return checked
}

// deepCheck says whether the image after fence k is also resumed to the
// end: always, except under the race detector, where every fourth fence
// and the last fence of each step are.
func (s *script) deepCheck(k int) bool {
	if !raceEnabled || k%4 == 0 {
		return true
	}
	for _, st := range s.steps {
		if st.fences == k {
			return true
		}
	}
	return false
}

// resume finishes an open session on the recovered pool from its tails (a
// job resuming after the crash), then requires the session closed as
// finished with the source's bytes, a clean Close, a clean recovery.Check
// and a clean reopen.
func (s *script) resume(p *core.FS, o observed, st int) error {
	in := p.Inode(s.ino)
	w := s.steps[st].w
	if o.open {
		g := s.gens[w.gen]
		for i, sg := range g.segs() {
			seg := o.info.Segments[i]
			if seg.Done {
				continue
			}
			for off := seg.Tail; off < sg[1]; off += ioChunk {
				n := min(ioChunk, sg[1]-off)
				if g.mode == format.SessionWrite {
					if _, err := p.Write(in, int64(off), srcdata.Bytes(g.seed, int64(off), int(n)), false); err != nil {
						return err
					}
					continue
				}
				r, err := p.Read(in, int64(off), int(n))
				if err != nil {
					return err
				}
				r.Done()
			}
		}
		if info, ok := p.Session(in); ok {
			return fmt.Errorf("every segment done from its tail, but the session is still open: %+v", info)
		}
		w = want{ph: phFinished, gen: w.gen}
	}
	if err := p.Close(); err != nil {
		return fmt.Errorf("Close: %v", err)
	}
	m := p.Medium()
	if recoveryCheck != nil {
		probs, err := recoveryCheck(m)
		if err != nil || len(probs) > 0 {
			return fmt.Errorf("recovery.Check after Close: %v %s", err, strings.Join(probs, "; "))
		}
	}
	p2, rep, err := core.Open(m, core.Options{TailInterval: fenceInterval})
	if err != nil {
		return fmt.Errorf("reopen: %v", err)
	}
	if !rep.WasClean || rep.ReplayedRecs != 0 || rep.SessionsOpen != 0 || rep.SessionsClosed != 0 {
		return fmt.Errorf("reopen after Close: %+v", *rep)
	}
	o2, err := observe(p2, rep, s.ino)
	if err != nil {
		return err
	}
	c := cand{w: w}
	if w.ph == phOpen { // cannot happen: resumed above
		return errors.New("session still open")
	}
	if err := s.match(o2, c); err != nil {
		return fmt.Errorf("after resume, Close and reopen: %v", err)
	}
	return nil
}

// sliceMedium opens an image in place (pmem.MemoryOver).
func sliceMedium(b []byte) pmem.Medium { return pmem.MemoryOver(b) }

// ---------------------------------------------------------------------------
// The tests.

func TestSessionEveryFence(t *testing.T) {
	var total atomic.Int64
	t.Run("write", func(t *testing.T) {
		t.Parallel()
		// An old 300 KiB file: a crash before StartSession's commit shows it.
		s := newSessionScript(t, 300<<10, 7)
		s.start(gen{threads: 4, size: sessSize, mode: format.SessionWrite, seed: 11})
		s.interleaved()
		if s.cur.ph != phFinished {
			t.Fatalf("the session did not finish by itself: %s", s.cur.ph)
		}
		total.Add(int64(s.rec.Fences()))
		s.verify()
		s.verifyEvictions()
	})
	t.Run("abandon", func(t *testing.T) {
		t.Parallel()
		s := newSessionScript(t, 0, 0)
		g := gen{threads: 4, size: sessSize, mode: format.SessionWrite, seed: 21}
		s.start(g)
		segs := g.segs()
		for j := uint64(0); j < 8; j++ { // segment 0: 128 KiB, two tails persisted
			s.io(s.workers[0], segs[0][0]+j*ioChunk, ioChunk)
		}
		for j := uint64(0); j < 5; j++ { // segment 1: 80 KiB
			s.io(s.workers[1], segs[1][0]+j*ioChunk, ioChunk)
		}
		for j := uint64(0); j < 3; j++ { // segment 3 backwards: tail stays at start
			s.io(s.workers[3], segs[3][1]-(j+1)*ioChunk, ioChunk)
		}
		s.abandon()
		// A new session on the same file: different split, other bytes.
		s.start(gen{threads: 2, size: sessSize, mode: format.SessionWrite, seed: 22})
		s.interleaved()
		if s.cur.ph != phFinished {
			t.Fatalf("the second session did not finish by itself: %s", s.cur.ph)
		}
		total.Add(int64(s.rec.Fences()))
		s.verify()
		s.verifyEvictions()
	})
	t.Run("read", func(t *testing.T) {
		t.Parallel()
		s := newSessionScript(t, sessSize, 31)
		s.start(gen{threads: 4, size: sessSize, mode: format.SessionRead, seed: 31})
		s.interleaved()
		if s.cur.ph != phFinished {
			t.Fatalf("the read session did not finish by itself: %s", s.cur.ph)
		}
		total.Add(int64(s.rec.Fences()))
		s.verify()
		s.verifyEvictions()
	})
	t.Cleanup(func() {
		t.Logf("%d fences in all; recovery.Check on every image: %v", total.Load(), recoveryCheck != nil)
	})
}

// TestSessionFenceSelfTest checks that the fence checker has teeth: on a
// medium that forgets every flush of the session file's data (a persist
// order in which Tail_ptr is stored without the data before it), it must
// find a crash image whose tail covers lost data.
func TestSessionFenceSelfTest(t *testing.T) {
	s := newSessionScript(t, 0, 0)
	var problems []string
	s.errf = func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	g := gen{threads: 4, size: sessSize, mode: format.SessionWrite, seed: 41}
	s.start(g)
	_, exts, err := fileExtents(s.rec.Bytes(), s.p.Superblock(), s.ino)
	if err != nil || len(exts) == 0 {
		t.Fatalf("file extents: %v %v", exts, err)
	}
	s.tr.drop = func(off, n int64) bool {
		for _, e := range exts {
			lo, hi := int64(e.Phys.Off()), int64(e.Phys.Off())+int64(e.Len*blk)
			if off < hi && off+n > lo {
				return true
			}
		}
		return false
	}
	for j := uint64(0); j < 8; j++ {
		s.io(s.workers[0], g.segs()[0][0]+j*ioChunk, ioChunk)
	}
	s.verify()
	found := false
	for _, p := range problems {
		found = found || strings.Contains(p, "differs from the source")
	}
	if !found {
		t.Fatalf("the checker found no tail past lost data on a medium that drops data flushes; it reported:\n%s", strings.Join(problems, "\n"))
	}
	t.Logf("the checker caught it: %d reports, e.g. %s", len(problems), problems[0])
}
