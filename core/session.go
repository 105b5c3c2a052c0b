package core

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/lock"
)

// ErrBusy: a session is already open on the file.
var ErrBusy = errors.New("a segmented-I/O session is already open on the file")

// DefaultTailInterval is how much progress a segment makes between two
// persisted Tail_ptr updates: a crash redoes at most this much per thread.
const DefaultTailInterval = 4 << 20

// session is the DRAM state of an open segmented-I/O session (SEEDS.md
// §1b). Its persistent half is the F_log and the P_logs in the pool.
type session struct {
	// cmu orders every store into the log regions (Tail_ptr, F_log entry)
	// against the close that frees them: holders re-check closed. Order:
	// Inode.mu -> cmu -> mu.
	cmu    sync.Mutex
	mu     sync.Mutex // leaf
	mode   uint32
	size   uint64
	flog   Blk
	hdr    format.FLogHeader
	owner  atomic.Uint32 // process of the session (first data request); others are other applications
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
	pmu        sync.Mutex // one persist of this segment at a time
}

// SessionSegment describes one segment (user.dnnfs.session, dnnfs recover).
type SessionSegment struct {
	Index  int    `json:"index"`
	Start  uint64 `json:"start"`
	Length uint64 `json:"length"`
	Tail   uint64 `json:"tail"` // resume offset: bytes before it are done and durable
	Done   bool   `json:"done"`
	Pid    uint32 `json:"pid"`
}

// SessionInfo describes a session.
type SessionInfo struct {
	Threads  int              `json:"threads"`
	Size     uint64           `json:"size"`
	Mode     string           `json:"mode"`
	Done     bool             `json:"done"`
	Segments []SessionSegment `json:"segments"`
}

func modeName(m uint32) string {
	if m == format.SessionRead {
		return "read"
	}
	return "write"
}

// tailWord is the 8-byte Tail_ptr of segment i in the pool mapping.
func (fs *FS) tailWord(s *session, i int) *uint64 {
	off := s.hdr.PLog.Off() + format.Off(i*format.PLogLine)
	return (*uint64)(unsafe.Pointer(&fs.m.Bytes()[off]))
}

func (fs *FS) tailOff(s *session, i int) format.Off {
	return s.hdr.PLog.Off() + format.Off(i*format.PLogLine)
}

func (fs *FS) entryOff(s *session, i int) format.Off {
	return s.flog.Off() + format.FLHeader + format.Off(i*format.FLEntry)
}

func (fs *FS) entryOf(s *session, i int) format.FEntry {
	seg := s.segs[i]
	e := format.FEntry{Pid: seg.pid, PartHead: seg.start, PLength: seg.end - seg.start, PLogAddr: fs.tailOff(s, i)}
	if seg.finished {
		e.PFlag, e.PLogAddr = 1, 0
	}
	if i+1 < len(s.segs) {
		e.Next = fs.entryOff(s, i+1)
	}
	return e
}

// StartSession opens a segmented session on a regular file: for writes the
// file is set to size bytes, all allocated (so no write extends it), and
// split into threads segments (4 KiB aligned, the last takes the rest).
// Persist order (SEEDS.md §1b): P_logs (Tail_ptr = segment start) and the
// F_log (entries linked by Next) are written and persisted in blocks
// nothing references yet; then one journal transaction sets the size,
// extents, Process_num, F_flag = 0 and F_log_addr.
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
	if threads < 1 || threads > format.MaxThreads || size == 0 || size > MaxFileSize ||
		uint64(threads) > (size+bs-1)/bs || (mode != format.SessionWrite && mode != format.SessionRead) {
		return ErrInvalid
	}
	segLen := size / uint64(threads) / bs * bs
	if segLen == 0 {
		return ErrInvalid
	}
	l, err := fs.lockData(Caller{}, in, 0, 0, lock.Exclusive, true)
	if err != nil {
		return err
	}
	defer in.locks.Release(l)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.sess.Load() != nil {
		return ErrBusy
	}
	if mode == format.SessionRead && size > in.d.Size {
		return ErrInvalid
	}
	c := fs.begin()
	nd := in.d
	if mode == format.SessionWrite {
		exts := in.exts
		if size < in.d.Size {
			kept, removed := cutExtents(exts, (size+bs-1)/bs, MaxFileSize/bs)
			exts = kept
			c.freed = append(c.freed, removed...)
		}
		need := uint64(0)
		holes := in.holesLocked(0, (size+bs-1)/bs)
		for _, h := range holes {
			need += h.Len
		}
		fb, pb := format.FLogBlocks(threads)
		if need+uint64(fb+pb) > fs.alloc.free() {
			return fmt.Errorf("%w: the session needs %d blocks, %d are free", ErrNoSpace, need+uint64(fb+pb), fs.alloc.free())
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
	s := &session{mode: mode, size: size}
	fb, pb := format.FLogBlocks(threads)
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
	s.flog = flog
	s.hdr = format.FLogHeader{Count: uint32(threads), PLog: plog, Blocks: fb, PBlocks: pb}
	for i := 0; i < threads; i++ {
		seg := &segment{idx: i, start: uint64(i) * segLen, end: uint64(i+1) * segLen}
		if i == threads-1 {
			seg.end = size
		}
		seg.tail = seg.start
		seg.persisted.Store(seg.start)
		s.segs = append(s.segs, seg)
	}
	// P_logs, then the F_log, persisted before anything points at them.
	mem := fs.m.Bytes()
	clear(mem[plog.Off() : plog.Off()+format.Off(pb)*bs])
	for i, seg := range s.segs {
		atomic.StoreUint64(fs.tailWord(s, i), seg.start)
	}
	if err := fs.m.Persist(int64(plog.Off()), int64(pb)*bs); err != nil {
		c.abort()
		return ioErr("writing a session's P_logs", err)
	}
	region := mem[flog.Off() : flog.Off()+format.Off(fb)*bs]
	clear(region)
	s.hdr.Encode(region)
	for i := range s.segs {
		e := fs.entryOf(s, i)
		e.Encode(region[format.FLHeader+i*format.FLEntry:])
	}
	if err := fs.m.Persist(int64(flog.Off()), int64(len(region))); err != nil {
		c.abort()
		return ioErr("writing a session's F_log", err)
	}
	nd.SetSessionFields(uint32(threads), 0, flog, size, mode)
	c.putInode(in, nd)
	if err := c.commit(); err != nil {
		return err
	}
	in.sess.Store(s)
	fs.log.Info("session started", zap.Uint64("ino", uint64(in.Ino)), zap.Int("threads", threads),
		zap.Uint64("size", size), zap.String("mode", modeName(mode)))
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
	info := SessionInfo{Threads: len(s.segs), Size: s.size, Mode: modeName(s.mode), Done: s.closed}
	for _, seg := range s.segs {
		info.Segments = append(info.Segments, SessionSegment{Index: seg.idx, Start: seg.start,
			Length: seg.end - seg.start, Tail: seg.persisted.Load(), Done: seg.finished, Pid: seg.pid})
	}
	return info, true
}

// sessionProgress records that [off, off+n) of the file completed for the
// caller: the segment's tail moves over the contiguous completed prefix
// and is persisted every tail interval and at the segment's end.
func (fs *FS) sessionProgress(in *Inode, c Caller, off, n uint64, write bool) {
	s := in.sess.Load()
	if s == nil || (s.mode == format.SessionWrite) != write {
		return
	}
	// Only the session's own process makes progress: another program's
	// read or write of the file is not the job's work (SEEDS.md §1b: the
	// tail is that thread's progress). TID 0 is the kernel's own requests
	// (writeback of the job's shared mappings) and in-process callers.
	if c.TID != 0 && fs.tgid(c.TID) != s.owner.Load() {
		return
	}
	end := min(off+n, s.size)
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
	if target > from && s.mode == format.SessionWrite {
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
		var ferr error
		if s.mode == format.SessionWrite {
			walk(exts, int64(from), int64(target-from), func(p int64, _, k int) {
				if p >= 0 {
					if err := fs.m.Flush(p, int64(k)); err != nil && ferr == nil {
						ferr = err
					}
				}
			})
			if err := fs.m.Fence(); err != nil && ferr == nil {
				ferr = err
			}
		}
		if ferr != nil {
			// The tail must not pass data that is not durable.
			s.cmu.Unlock()
			return ioErr(fmt.Sprintf("persisting segment %d's data [%d, %d)", seg.idx, from, target), ferr)
		}
		atomic.StoreUint64(fs.tailWord(s, seg.idx), target)
		if err := fs.m.Persist(int64(fs.tailOff(s, seg.idx)), 8); err != nil {
			// Memory may run ahead of the media here: a crash redoes more.
			s.cmu.Unlock()
			return ioErr(fmt.Sprintf("persisting segment %d's tail", seg.idx), err)
		}
		seg.persisted.Store(target)
	}
	if storePid || finish {
		// The entry changes (Pid recorded; or P_flag = 1, P_log_addr =
		// NULL): one 64-byte journal record. DRAM says finished only after
		// it commits, so no other segment closes the session before.
		s.mu.Lock()
		e := fs.entryOf(s, seg.idx)
		e.Pid = pid
		if finish {
			e.PFlag, e.PLogAddr = 1, 0
		}
		s.mu.Unlock()
		var buf [format.FLEntry]byte
		e.Encode(buf[:])
		c := fs.begin()
		c.tx.Write(fs.entryOff(s, seg.idx), buf[:])
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
		nd.SetSessionFields(uint32(len(s.segs)), 1, 0, s.size, s.mode)
	} else {
		nd.SetSessionFields(0, 0, 0, 0, 0)
	}
	c.putInode(in, nd)
	c.freed = append(c.freed, format.Extent{Phys: s.flog, Len: uint64(s.hdr.Blocks)},
		format.Extent{Phys: s.hdr.PLog, Len: uint64(s.hdr.PBlocks)})
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
func (c *change) stageAbandonLocked(in *Inode, nd *format.Inode) {
	s := in.sess.Load()
	if s == nil {
		return
	}
	nd.SetSessionFields(0, 0, 0, 0, 0)
	c.freed = append(c.freed, format.Extent{Phys: s.flog, Len: uint64(s.hdr.Blocks)},
		format.Extent{Phys: s.hdr.PLog, Len: uint64(s.hdr.PBlocks)})
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

// loadSession rebuilds an open session at mount and runs SEEDS.md §1c:
// a segment whose Tail_ptr reached its end while P_flag is still 0 is
// finished (step 4); when no unfinished segment remains, the session is
// closed (step 6). Others stay open for the job to resume from Tail_ptr.
func (fs *FS) loadSession(in *Inode) error {
	_, _, flog, size, mode := in.d.SessionFields()
	if flog == 0 {
		return nil
	}
	b := fs.m.Bytes()
	if !fs.sb.ValidData(flog, 1) {
		return fmt.Errorf("F_log at block %d out of range", flog)
	}
	hdr, err := format.DecodeFLogHeader(b[flog.Off():])
	if err != nil {
		return fmt.Errorf("F_log at block %d: %w", flog, err)
	}
	if !fs.sb.ValidData(flog, uint64(hdr.Blocks)) || !fs.sb.ValidData(hdr.PLog, uint64(hdr.PBlocks)) ||
		!fs.alloc.markUsed(flog, uint64(hdr.Blocks)) || !fs.alloc.markUsed(hdr.PLog, uint64(hdr.PBlocks)) {
		return fmt.Errorf("F_log at block %d or P_log at block %d out of range or shared", flog, hdr.PLog)
	}
	s := &session{mode: mode, size: size, flog: flog, hdr: hdr}
	for i := 0; i < int(hdr.Count); i++ {
		off := s.flog.Off() + format.FLHeader + format.Off(i*format.FLEntry)
		e, err := format.DecodeFEntry(b[off:])
		if err != nil {
			return fmt.Errorf("F_log entry %d: %w", i, err)
		}
		if e.PartHead > size || e.PLength > size-e.PartHead {
			return fmt.Errorf("F_log entry %d: segment [%d, +%d) outside the session's %d bytes", i, e.PartHead, e.PLength, size)
		}
		seg := &segment{idx: i, start: e.PartHead, end: e.PartHead + e.PLength, pid: e.Pid, pidStored: true, finished: e.PFlag == 1}
		tail := atomic.LoadUint64(fs.tailWord(s, i))
		if seg.finished {
			tail = seg.end
		}
		if tail < seg.start || tail > seg.end || seg.end > size {
			return fmt.Errorf("F_log entry %d: Tail_ptr %d outside its segment [%d, %d)", i, tail, seg.start, seg.end)
		}
		seg.tail = tail
		seg.persisted.Store(tail)
		s.segs = append(s.segs, seg)
	}
	in.sess.Store(s)
	return nil
}

// recoverSessions runs the §1c repair steps on sessions loaded at mount.
func (fs *FS) recoverSessions() (open, closed int, err error) {
	for _, in := range fs.Inodes() {
		s := in.sess.Load()
		if s == nil {
			continue
		}
		for _, seg := range s.segs {
			if !seg.finished && seg.tail == seg.end {
				if err := fs.persistTail(in, s, seg); err != nil { // step 4
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
