package core

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal/seglog"
)

// DefaultTailInterval is how much progress a segment makes between two
// persisted Tail_ptr updates: a crash redoes at most this much per thread.
const DefaultTailInterval = 4 << 20

// session is the DRAM state of an open segmented-I/O session
// (DESIGN.md §Two-layer log). Its persistent half is the segment log
// (package seglog): the F_log and the P_logs in the pool.
type session struct {
	// cmu orders every store into the log regions (Tail_ptr, F_log entry)
	// against the close that frees them: holders re-check closed
	// (DESIGN.md §Lock order: Inode.mu -> cmu -> mu).
	cmu    sync.Mutex
	mu     sync.Mutex              // leaf
	log    *seglog.Log             // immutable
	owner  atomic.Pointer[process] // of the session (first data request); others are other applications
	segs   []*segment
	closed bool
}

type segment struct {
	idx        int
	start, end uint64
	tail       uint64      // contiguous completed prefix (DRAM)
	spans      [][2]uint64 // completions beyond tail, sorted, disjoint
	pid        uint32
	pidStored  bool
	finished   bool // P_flag = 1 on media
	persisted  atomic.Uint64
	pmu        sync.Mutex // one persist of this segment at a time; taken before Inode.mu and cmu (persistTail)
}

// SessionSegment describes one segment (user.dnnfs.session, dnnfs recover).
type SessionSegment = seglog.SegmentReport

// SessionInfo describes a session.
type SessionInfo = seglog.Report

// StartSession opens a segmented session on a regular file: for writes the
// file is set to size bytes, all allocated (so no write extends it), and
// split into threads segments (4 KiB aligned, the last takes the rest).
// Persist order (DESIGN.md §Two-layer log): the segment log is written and
// persisted in blocks nothing references yet (seglog.Create); then one
// journal transaction sets the size, extents and the session fields that
// link the log to the file.
func (fs *FS) StartSession(in *Inode, threads int, size uint64, mode uint32) error {
	if in.IsDir() {
		return ErrIsDir
	}
	if in.IsSpecial() {
		return ErrInvalid
	}
	if in.IsTable() {
		return fmt.Errorf("%w: segmented sessions", ErrTable)
	}
	if size > MaxFileSize || (mode != format.SessionWrite && mode != format.SessionRead) {
		return ErrInvalid
	}
	segs, err := seglog.Split(size, threads)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	unlock, err := fs.lockWhole(in)
	if err != nil {
		return err
	}
	defer unlock()
	if in.sess.Load() != nil {
		return ErrBusy
	}
	if mode == format.SessionRead && size > in.d.Size {
		return ErrInvalid
	}
	fb, pb := seglog.Blocks(threads)
	c := fs.begin()
	nd := in.d
	if mode == format.SessionWrite {
		exts := in.exts
		if size < in.d.Size {
			kept, removed := cutExtents(exts, (size+bs-1)/bs, format.MaxFileBlocks)
			exts = kept
			c.freed = append(c.freed, removed...)
		}
		need := uint64(0)
		holes := in.holesLocked(0, (size+bs-1)/bs)
		for _, h := range holes {
			need += h.Len
		}
		if need+uint64(fb+pb) > fs.available() {
			return fmt.Errorf("%w: the session needs %d blocks, %d are free", ErrNoSpace, need+uint64(fb+pb), fs.available())
		}
		added, err := c.fillHolesLocked(in, holes, true, false)
		if err != nil {
			c.abort()
			return err
		}
		if size > in.d.Size {
			if err := fs.zeroTailLocked(in, int64(in.d.Size), int64(size)); err != nil {
				c.abort()
				return err
			}
		}
		if len(added) > 0 || len(exts) != len(in.exts) {
			if err := c.putExtentsLocked(in, &nd, mergeExtents(exts, added)); err != nil {
				c.abort()
				return err
			}
		}
		nd.Size = size
	}
	flog, err := c.allocMeta(fs.sb.DataStart, uint64(fb))
	if err != nil {
		c.abort()
		return err
	}
	plog, err := c.allocMeta(flog+Blk(fb), uint64(pb))
	if err != nil {
		c.abort()
		return err
	}
	log, err := seglog.Create(fs.m, seglog.NewLayout(flog, plog, threads), segs, size, mode)
	if err != nil {
		c.abort()
		return ioErr("writing a session's log", err)
	}
	s := &session{log: log}
	for i, g := range segs {
		seg := &segment{idx: i, start: g.Start, end: g.End, tail: g.Tail}
		seg.persisted.Store(g.Tail)
		s.segs = append(s.segs, seg)
	}
	log.Fields().Store(&nd)
	c.putInode(in, nd)
	if err := c.commit(); err != nil {
		return err
	}
	in.sess.Store(s)
	fs.log.Info("session started", zap.Uint64("ino", uint64(in.Ino)), zap.Int("threads", threads),
		zap.Uint64("size", size), zap.String("mode", seglog.ModeName(mode)))
	return nil
}

// Session returns the open session's state.
func (fs *FS) Session(in *Inode) (SessionInfo, bool) {
	s := in.sess.Load()
	if s == nil {
		return SessionInfo{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	info := SessionInfo{Threads: len(s.segs), Size: s.log.Size(), Mode: seglog.ModeName(s.log.Mode()), Done: s.closed}
	for _, seg := range s.segs {
		info.Segments = append(info.Segments, SessionSegment{Index: seg.idx, Start: seg.start,
			Length: seg.end - seg.start, Tail: seg.persisted.Load(), Done: seg.finished, Pid: seg.pid})
	}
	return info, true
}

// sessionProgress records that [off, off+n) of the file completed for the
// caller: the segment's tail moves over the contiguous completed prefix
// and is persisted every tail interval and at the segment's end.
//
// pid is the caller's process as lockData found it while the request was
// in flight (0 if the file had no session then): by the time a read's
// reply is sent the reading thread may have exited (the last read of its
// segment), and its id no longer names a process.
func (fs *FS) sessionProgress(in *Inode, c Caller, pid uint32, off, n uint64, write bool) {
	s := in.sess.Load()
	if s == nil || (s.log.Mode() == format.SessionWrite) != write {
		return
	}
	// Only the session's own process makes progress: another program's
	// read or write of the file is not the job's work (DESIGN.md
	// §Two-layer log: the tail is that thread's progress). TID 0 is the
	// kernel's own requests (writeback of the job's shared mappings) and
	// in-process callers.
	if c.TID != 0 {
		if pid == 0 {
			pid = fs.tgid(c.TID)
		}
		if o := s.owner.Load(); o == nil || pid != o.pid {
			return
		}
	}
	end := min(off+n, s.log.Size())
	var todo []*segment
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].end > off })
	for ; i < len(s.segs) && s.segs[i].start < end; i++ {
		seg := s.segs[i]
		a, b := max(off, seg.start), min(end, seg.end)
		if seg.pid == 0 {
			seg.pid = c.TID
		}
		seg.addSpan(a, b)
		if seg.tail-seg.persisted.Load() >= fs.tailInterval || (seg.tail == seg.end && !seg.finished) || !seg.pidStored {
			todo = append(todo, seg)
		}
	}
	s.mu.Unlock()
	for _, seg := range todo {
		if err := fs.persistTail(in, s, seg); err != nil {
			fs.log.Error("persisting a session tail failed; a crash now redoes more of this segment",
				zap.Uint64("ino", uint64(in.Ino)), zap.Int("segment", seg.idx), zap.Error(err))
		}
	}
}

// addSpan merges [a, b) into the completed spans and advances the tail.
func (seg *segment) addSpan(a, b uint64) {
	if b <= seg.tail {
		return
	}
	a = max(a, seg.tail)
	spans := append(seg.spans, [2]uint64{a, b})
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	merged := spans[:0]
	for _, sp := range spans {
		if n := len(merged); n > 0 && sp[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], sp[1])
			continue
		}
		merged = append(merged, sp)
	}
	for len(merged) > 0 && merged[0][0] <= seg.tail {
		seg.tail = max(seg.tail, merged[0][1])
		merged = merged[1:]
	}
	seg.spans = merged
}

// persistTail makes the segment's progress durable: for writes, the data
// up to the tail first (flush + fence), then the 8-byte Tail_ptr store,
// persisted. A segment whose tail reached its end is finished, and the
// last one to finish closes the session.
func (fs *FS) persistTail(in *Inode, s *session, seg *segment) error {
	seg.pmu.Lock()
	defer seg.pmu.Unlock()
	s.mu.Lock()
	target, pid, storePid := seg.tail, seg.pid, !seg.pidStored
	finish := seg.tail == seg.end && !seg.finished
	s.mu.Unlock()
	from := seg.persisted.Load()
	var exts []format.Extent
	if target > from && s.log.Mode() == format.SessionWrite {
		in.mu.Lock() // before cmu: the lock order is Inode.mu -> cmu
		exts = in.exts
		in.mu.Unlock()
	}
	s.cmu.Lock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed { // the log regions may be freed already
		s.cmu.Unlock()
		return nil
	}
	if target > from {
		// For writes, the pool ranges of the data the tail passes: the
		// log makes them durable before the Tail_ptr moves.
		var data []seglog.Span
		if s.log.Mode() == format.SessionWrite {
			walk(exts, int64(from), int64(target-from), func(p int64, _, k int) {
				if p >= 0 {
					data = append(data, seglog.Span{Off: p, Len: int64(k)})
				}
			})
		}
		if err := s.log.MoveTail(seg.idx, target, data); err != nil {
			s.cmu.Unlock()
			return ioErr(fmt.Sprintf("persisting segment %d's progress [%d, %d)", seg.idx, from, target), err)
		}
		seg.persisted.Store(target)
	}
	if storePid || finish {
		// The entry changes (Pid recorded; or P_flag = 1, P_log_addr =
		// NULL): one 64-byte journal record. DRAM says finished only after
		// it commits, so no other segment closes the session before.
		g := seglog.Segment{Start: seg.start, End: seg.end, Pid: pid}
		s.mu.Lock()
		g.Done = seg.finished || finish
		s.mu.Unlock()
		c := fs.begin()
		s.log.StageEntry(c.tx, seg.idx, g)
		if err := c.commit(); err != nil {
			s.cmu.Unlock()
			return err
		}
		s.mu.Lock()
		seg.pidStored, seg.pid = true, pid
		if finish {
			seg.finished = true
		}
		s.mu.Unlock()
	}
	s.cmu.Unlock()
	if finish {
		// The P_log is deleted with its region when the session closes.
		s.mu.Lock()
		all := true
		for _, g := range s.segs {
			all = all && g.finished
		}
		s.mu.Unlock()
		if all {
			in.mu.Lock()
			defer in.mu.Unlock()
			return fs.closeSessionLocked(in, true)
		}
	}
	return nil
}

// closeSessionLocked ends the session: finished (F_flag = 1) or abandoned
// (F_flag = 0, Process_num = 0); F_log_addr = NULL in one transaction that
// also frees the F_log and P_log regions.
// Precondition: in.mu is held.
func (fs *FS) closeSessionLocked(in *Inode, finished bool) error {
	s := in.sess.Load()
	if s == nil {
		return nil
	}
	s.cmu.Lock() // no tail store or entry commit is in flight past this
	defer s.cmu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	c := fs.begin()
	nd := in.d
	if finished {
		s.log.Fields().Finish().Store(&nd)
	} else {
		seglog.Fields{}.Store(&nd) // no session
	}
	c.putInode(in, nd)
	c.freed = append(c.freed, s.log.Layout().Regions()...)
	if err := c.commit(); err != nil {
		s.mu.Lock()
		s.closed = false
		s.mu.Unlock()
		return err
	}
	in.sess.Store(nil)
	fs.log.Info("session closed", zap.Uint64("ino", uint64(in.Ino)), zap.Bool("finished", finished))
	return nil
}

// stageAbandonLocked adds the abandonment of in's open session to a
// change (nd is the staged inode): a truncate or hole punch invalidates
// the tails, and resuming from them would skip bytes that are gone.
// Precondition: in.mu is held.
func (c *change) stageAbandonLocked(in *Inode, nd *format.Inode) {
	s := in.sess.Load()
	if s == nil {
		return
	}
	seglog.Fields{}.Store(nd) // no session
	c.freed = append(c.freed, s.log.Layout().Regions()...)
	fs := c.fs
	// Closed before the commit frees the regions; cmu keeps in-flight
	// tail stores out until then.
	s.cmu.Lock()
	s.mu.Lock()
	wasClosed := s.closed
	s.closed = true
	s.mu.Unlock()
	c.undo = append(c.undo, func() {
		s.mu.Lock()
		s.closed = wasClosed
		s.mu.Unlock()
		s.cmu.Unlock()
	})
	c.after = append(c.after, func() {
		s.cmu.Unlock()
		in.sess.Store(nil)
		fs.log.Warn("session abandoned: the file's size or data layout changed under it",
			zap.Uint64("ino", uint64(in.Ino)))
	})
}

// persistSessionTails makes all progress of an open session durable
// (fsync, clean unmount).
func (fs *FS) persistSessionTails(in *Inode) error {
	s := in.sess.Load()
	if s == nil {
		return nil
	}
	for _, seg := range s.segs {
		if err := fs.persistTail(in, s, seg); err != nil {
			return err
		}
	}
	return nil
}

// AbandonSession drops an open session on purpose (setfattr -x).
func (fs *FS) AbandonSession(in *Inode) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.sess.Load() == nil {
		return ErrNoAttr
	}
	return fs.closeSessionLocked(in, false)
}

// FinishSession declares every segment done and closes the session (an
// admin's `dnnfs recover --finish`).
func (fs *FS) FinishSession(in *Inode) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.sess.Load() == nil {
		return ErrNoAttr
	}
	return fs.closeSessionLocked(in, true)
}

// loadSession rebuilds an open session's DRAM state at mount from its
// segment log as recovery.Mount read it.
func (fs *FS) loadSession(in *Inode, st *seglog.State) {
	if st == nil {
		return
	}
	s := &session{log: seglog.Attach(fs.m, st)}
	for i, g := range st.Segments {
		seg := &segment{idx: i, start: g.Start, end: g.End, tail: g.Tail, pid: g.Pid, pidStored: true, finished: g.Done}
		seg.persisted.Store(g.Tail)
		s.segs = append(s.segs, seg)
	}
	in.sess.Store(s)
}

// recoverSessions runs the mount's repair steps (DESIGN.md §Two-layer log)
// on sessions loaded at mount.
func (fs *FS) recoverSessions() (open, closed int, err error) {
	for _, in := range fs.Inodes() {
		s := in.sess.Load()
		if s == nil {
			continue
		}
		for _, seg := range s.segs {
			if !seg.finished && seg.tail == seg.end {
				// Finished before its entry said so (DESIGN.md §Two-layer
				// log, crash resume): mark it finished.
				if err := fs.persistTail(in, s, seg); err != nil {
					return open, closed, err
				}
			}
		}
		if in.sess.Load() == nil {
			closed++
			continue
		}
		all := true
		for _, seg := range s.segs {
			all = all && seg.finished
		}
		if all {
			in.mu.Lock()
			err := fs.closeSessionLocked(in, true)
			in.mu.Unlock()
			if err != nil {
				return open, closed, err
			}
			closed++
			continue
		}
		open++
		fs.log.Warn("segmented session left open by a crash: resume it from the tails",
			zap.Uint64("ino", uint64(in.Ino)), zap.String("path", fs.PathOf(in)))
	}
	return open, closed, nil
}

// PathsOf returns a path from the root of each inode in want that has one,
// in one walk of the tree (PathOf walks it once per inode); an unlinked
// inode (deleted but open) has none.
func (fs *FS) PathsOf(want map[Ino]bool) map[Ino]string {
	type item struct {
		in   *Inode
		path string
	}
	found := make(map[Ino]string, len(want))
	root := fs.Root()
	if want[root.Ino] {
		found[root.Ino] = "/"
	}
	stack := []item{{root, ""}}
	for len(stack) > 0 && len(found) < len(want) {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		it.in.mu.Lock()
		var kids []item
		for name, e := range it.in.dir.names {
			p := it.path + "/" + name
			if _, ok := found[e.ino]; !ok && want[e.ino] {
				found[e.ino] = p
			}
			if e.typ == format.DTDir {
				if ch := fs.Inode(e.ino); ch != nil {
					kids = append(kids, item{ch, p})
				}
			}
		}
		it.in.mu.Unlock()
		stack = append(stack, kids...)
	}
	return found
}

// PathOf returns a path of the inode from the root ("" if unreachable).
func (fs *FS) PathOf(target *Inode) string {
	type item struct {
		in   *Inode
		path string
	}
	root := fs.Root()
	if target == root {
		return "/"
	}
	stack := []item{{root, ""}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		it.in.mu.Lock()
		var kids []item
		for name, e := range it.in.dir.names {
			p := it.path + "/" + name
			if e.ino == target.Ino {
				it.in.mu.Unlock()
				return p
			}
			if e.typ == format.DTDir {
				if ch := fs.Inode(e.ino); ch != nil {
					kids = append(kids, item{ch, p})
				}
			}
		}
		it.in.mu.Unlock()
		stack = append(stack, kids...)
	}
	return ""
}
