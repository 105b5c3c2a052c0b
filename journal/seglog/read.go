package seglog

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/dnnfs/dnnfs/format"
)

// logError reads as its message alone and matches its sentinel and cause
// with errors.Is: the checker shows the message to a person.
type logError struct {
	msg  string
	errs []error
}

func (e *logError) Error() string   { return e.msg }
func (e *logError) Unwrap() []error { return e.errs }

// mark builds an error of kind sentinel; a codec error cause is appended
// to the message without the codec's own structure-name prefix.
func mark(sentinel, cause error, f string, args ...any) error {
	e := &logError{msg: fmt.Sprintf(f, args...), errs: []error{sentinel}}
	if cause != nil {
		msg := cause.Error()
		for _, p := range []string{"F_log entry: ", "F_log: "} {
			msg = strings.TrimPrefix(msg, p)
		}
		e.msg += ": " + msg
		e.errs = append(e.errs, cause)
	}
	return e
}

// Source is the pool as a reader sees it: the runtime's mapping, or the
// checker's view of it after an uncommitted journal replay.
type Source interface {
	// ValidData reports whether blocks [b, b+n) lie in the data region.
	ValidData(b format.Blk, n uint64) bool
	// Read returns the n bytes at off, inside blocks ValidData accepted.
	// The reader does not modify them.
	Read(off format.Off, n int) []byte
}

// Mapped is a Source over a pool's bytes b and its superblock sb.
func Mapped(sb *format.Superblock, b []byte) Source { return mapped{sb, b} }

type mapped struct {
	sb *format.Superblock
	b  []byte
}

func (m mapped) ValidData(b format.Blk, n uint64) bool {
	return m.sb.ValidData(b, n) && uint64(b)+n <= uint64(len(m.b))/format.BlockSize
}

func (m mapped) Read(off format.Off, n int) []byte { return m.b[off : off+format.Off(n)] }

// State is a log read back: its place, the session it covers and each
// segment's resume point (Tail is End for a done segment).
type State struct {
	Layout   Layout
	Size     uint64
	Mode     uint32
	Segments []Segment
}

// Read reads the log the fields of an open session name (mount): the
// header and every entry must decode, lie in range and hold a Tail_ptr
// inside its segment. It does not check what the runtime never follows
// (Next, P_log_addr, the count against Process_num): Check does.
func Read(src Source, f Fields) (*State, error) {
	if !f.Open() {
		return nil, ErrNoLog
	}
	return read(src, f, false)
}

// Check validates the session fields of an inode and the log they name,
// as the offline checker does: everything Read checks, and the fields
// against each other, the entry count against Process_num, and each
// entry's Next and P_log_addr. It returns nil State for no session or a
// finished one.
func Check(src Source, f Fields) (*State, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	if !f.Open() {
		return nil, nil
	}
	return read(src, f, true)
}

var le = binary.LittleEndian

// read decodes the log; strict adds Check's checks, in the order a person
// fixing the pool wants the first problem named.
func read(src Source, f Fields, strict bool) (*State, error) {
	flog := f.FLog
	if !src.ValidData(flog, 1) {
		return nil, mark(ErrOutOfBounds, nil, "F_log at block %d lies outside the data region", flog)
	}
	hdr, err := format.DecodeFLogHeader(src.Read(flog.Off(), format.FLHeader))
	if err != nil {
		return nil, mark(ErrHeader, err, "F_log at block %d", flog)
	}
	lay := Layout{FLog: flog, Header: hdr}
	switch {
	case strict && hdr.Count != f.ProcessNum:
		return nil, mark(ErrCount, nil, "F_log at block %d has %d entries, Process_num says %d", flog, hdr.Count, f.ProcessNum)
	case !src.ValidData(flog, uint64(hdr.Blocks)):
		return nil, mark(ErrOutOfBounds, nil, "F_log at block %d (%d blocks) runs past the data region", flog, hdr.Blocks)
	case !src.ValidData(hdr.PLog, uint64(hdr.PBlocks)):
		return nil, mark(ErrOutOfBounds, nil, "P_log at block %d (%d blocks) lies outside the data region", hdr.PLog, hdr.PBlocks)
	case hdr.PLog < flog+format.Blk(hdr.Blocks) && flog < hdr.PLog+format.Blk(hdr.PBlocks):
		return nil, mark(ErrOutOfBounds, nil, "P_log at block %d (%d blocks) overlaps the F_log at block %d (%d blocks)", hdr.PLog, hdr.PBlocks, flog, hdr.Blocks)
	}
	st := &State{Layout: lay, Size: f.Size, Mode: f.Mode, Segments: make([]Segment, 0, hdr.Count)}
	for i := 0; i < lay.Count(); i++ {
		e, err := format.DecodeFEntry(src.Read(lay.EntryOff(i), format.FLEntry))
		if err != nil {
			return nil, mark(ErrEntry, err, "F_log entry %d", i)
		}
		if strict {
			var next, tailAddr format.Off
			if i+1 < lay.Count() {
				next = lay.EntryOff(i + 1)
			}
			if e.PFlag == 0 {
				tailAddr = lay.TailOff(i)
			}
			switch {
			case e.Next != next:
				return nil, mark(ErrLink, nil, "F_log entry %d: Next is byte %d, want %d", i, e.Next, next)
			case e.PLogAddr != tailAddr:
				return nil, mark(ErrLink, nil, "F_log entry %d: P_log_addr is byte %d, want %d", i, e.PLogAddr, tailAddr)
			}
		}
		if e.PartHead > f.Size || e.PLength > f.Size-e.PartHead {
			return nil, mark(ErrEntry, nil, "F_log entry %d: segment [%d, +%d) outside the session's %d bytes", i, e.PartHead, e.PLength, f.Size)
		}
		g := Segment{Start: e.PartHead, End: e.PartHead + e.PLength, Pid: e.Pid, Done: e.PFlag == 1}
		g.Tail = le.Uint64(src.Read(lay.TailOff(i), 8))
		if g.Done {
			g.Tail = g.End
		}
		if g.Tail < g.Start || g.Tail > g.End {
			return nil, mark(ErrTail, nil, "F_log entry %d: Tail_ptr %d outside its segment [%d, %d)", i, g.Tail, g.Start, g.End)
		}
		st.Segments = append(st.Segments, g)
	}
	return st, nil
}
