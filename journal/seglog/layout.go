package seglog

import (
	"fmt"

	"github.com/dnnfs/dnnfs/format"
)

// Segment is one segment's persistent state: the file bytes [Start, End)
// one thread works on, its resume point and its F_log entry's fields.
type Segment struct {
	Start, End uint64
	Tail       uint64 // Tail_ptr: the bytes before it are done (and durable, for writes); End once Done
	Pid        uint32 // thread of the segment's first request, 0 = none yet
	Done       bool   // P_flag = 1
}

// Split cuts size bytes into n segments, 4 KiB aligned, the last one
// taking the rest; each starts with its tail at its start.
func Split(size uint64, n int) ([]Segment, error) {
	const bs = format.BlockSize
	if n < 1 || n > format.MaxThreads || size == 0 || uint64(n) > (size+bs-1)/bs {
		return nil, fmt.Errorf("%w: %d bytes, %d segments", ErrGeometry, size, n)
	}
	segLen := size / uint64(n) / bs * bs
	if segLen == 0 {
		return nil, fmt.Errorf("%w: %d bytes, %d segments", ErrGeometry, size, n)
	}
	segs := make([]Segment, n)
	for i := range segs {
		g := Segment{Start: uint64(i) * segLen, End: uint64(i+1) * segLen}
		if i == n-1 {
			g.End = size
		}
		g.Tail = g.Start
		segs[i] = g
	}
	return segs, nil
}

// Blocks returns the sizes of the F_log and P_log regions of n segments:
// what the caller allocates before Create.
func Blocks(n int) (flog, plog uint32) { return format.FLogBlocks(n) }

// Layout places one session's log area in the pool: the F_log region at
// FLog and the P_log region its header names.
type Layout struct {
	FLog   format.Blk
	Header format.FLogHeader
}

// NewLayout is the layout of n segments in the regions at flog and plog
// (each of the size Blocks gives).
func NewLayout(flog, plog format.Blk, n int) Layout {
	fb, pb := Blocks(n)
	return Layout{FLog: flog, Header: format.FLogHeader{Count: uint32(n), PLog: plog, Blocks: fb, PBlocks: pb}}
}

// Count is the number of segments.
func (l Layout) Count() int { return int(l.Header.Count) }

// EntryOff is the pool byte offset of segment i's F_log entry.
func (l Layout) EntryOff(i int) format.Off {
	return l.FLog.Off() + format.FLHeader + format.Off(i*format.FLEntry)
}

// TailOff is the pool byte offset of segment i's Tail_ptr (its P_log line).
func (l Layout) TailOff(i int) format.Off {
	return l.Header.PLog.Off() + format.Off(i*format.PLogLine)
}

// Entry is segment i's F_log entry: linked to the next entry, and naming
// its Tail_ptr until it is done.
func (l Layout) Entry(i int, g Segment) format.FEntry {
	e := format.FEntry{Pid: g.Pid, PartHead: g.Start, PLength: g.End - g.Start, PLogAddr: l.TailOff(i)}
	if g.Done {
		e.PFlag, e.PLogAddr = 1, 0
	}
	if i+1 < l.Count() {
		e.Next = l.EntryOff(i + 1)
	}
	return e
}

// Regions are the F_log region, then the P_log region: what the session
// owns, freed when it closes or its file goes.
func (l Layout) Regions() []format.Extent {
	return []format.Extent{
		{Phys: l.FLog, Len: uint64(l.Header.Blocks)},
		{Phys: l.Header.PLog, Len: uint64(l.Header.PBlocks)},
	}
}

// Fields are the session fields of the owning inode (FORMAT.md "Inode"):
// what links a log to its file. All zero is no session.
type Fields struct {
	ProcessNum uint32     // segments
	FFlag      uint32     // 0 = open (or none), 1 = finished
	FLog       format.Blk // the F_log region, 0 = none
	Size       uint64     // bytes the session covers
	Mode       uint32     // format.SessionWrite or format.SessionRead
}

// FieldsOf reads the session fields of an on-media inode.
func FieldsOf(d *format.Inode) Fields {
	var f Fields
	f.ProcessNum, f.FFlag, f.FLog, f.Size, f.Mode = d.SessionFields()
	return f
}

// Store writes the fields into an on-media inode (the caller commits it).
func (f Fields) Store(d *format.Inode) {
	d.SetSessionFields(f.ProcessNum, f.FFlag, f.FLog, f.Size, f.Mode)
}

// Open reports whether the fields name a log.
func (f Fields) Open() bool { return f.FLog != 0 }

// Finish is the fields once every segment is done: F_flag 1, no F_log;
// Process_num, size and mode stay as a record of the finished job.
func (f Fields) Finish() Fields {
	f.FFlag, f.FLog = 1, 0
	return f
}

// Check validates the fields against each other (the offline checker):
// no session, a finished one, or an open one naming an F_log.
func (f Fields) Check() error {
	switch {
	case f == Fields{}:
		return nil
	case f.FFlag > 1:
		return mark(ErrFields, nil, "F_flag %d", f.FFlag)
	case f.Mode != format.SessionWrite && f.Mode != format.SessionRead:
		return mark(ErrFields, nil, "mode %d", f.Mode)
	case f.ProcessNum < 1 || f.ProcessNum > format.MaxThreads:
		return mark(ErrFields, nil, "Process_num %d", f.ProcessNum)
	case f.FLog == 0 && f.FFlag != 1:
		return mark(ErrFields, nil, "F_flag 0 (not finished) without an F_log")
	case f.FLog != 0 && f.FFlag != 0:
		return mark(ErrFields, nil, "F_flag 1 (finished) still naming an F_log at block %d", f.FLog)
	}
	return nil
}

// ModeName names a session mode as reports show it.
func ModeName(m uint32) string {
	if m == format.SessionRead {
		return "read"
	}
	return "write"
}

// SegmentReport describes one segment's resume point (user.dnnfs.session,
// dnnfs recover).
type SegmentReport struct {
	Index  int    `json:"index"`
	Start  uint64 `json:"start"`
	Length uint64 `json:"length"`
	Tail   uint64 `json:"tail"` // resume offset: bytes before it are done and durable
	Done   bool   `json:"done"`
	Pid    uint32 `json:"pid"`
}

// End is the segment's end offset.
func (g SegmentReport) End() uint64 { return g.Start + g.Length }

// Report describes a session and its resume points.
type Report struct {
	Threads  int             `json:"threads"`
	Size     uint64          `json:"size"`
	Mode     string          `json:"mode"`
	Done     bool            `json:"done"`
	Segments []SegmentReport `json:"segments"`
}

// Remaining is the bytes the job still has to do: from each unfinished
// segment's tail to its end.
func (r Report) Remaining() uint64 {
	var n uint64
	for _, g := range r.Segments {
		if !g.Done {
			n += g.End() - g.Tail
		}
	}
	return n
}

// Short lists the segments whose tail has not reached their end and that
// are not done: what finishing the session by hand declares done unseen.
func (r Report) Short() []SegmentReport {
	var out []SegmentReport
	for _, g := range r.Segments {
		if !g.Done && g.Tail < g.End() {
			out = append(out, g)
		}
	}
	return out
}
