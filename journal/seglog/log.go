package seglog

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/pmem"
)

// Log is an open session's log area on the medium: the stores and
// persists of its persist steps. Its methods do no locking: the caller
// serialises the moves of one segment and keeps them away from the
// freeing of the regions.
type Log struct {
	m    pmem.Medium
	lay  Layout
	size uint64
	mode uint32
}

// Create writes a fresh log for segs (from Split) into the regions lay
// places, which nothing references yet: the P_log region zeroed with each
// Tail_ptr at its segment's start, persisted; then the F_log header and
// entries, persisted. The caller then links it to the file with Fields in
// one transaction.
func Create(m pmem.Medium, lay Layout, segs []Segment, size uint64, mode uint32) (*Log, error) {
	if len(segs) != lay.Count() {
		return nil, fmt.Errorf("%w: %d segments in a layout of %d", ErrGeometry, len(segs), lay.Count())
	}
	l := &Log{m: m, lay: lay, size: size, mode: mode}
	mem := m.Bytes()
	plog := lay.Header.PLog.Off()
	clear(mem[plog : plog+format.Off(lay.Header.PBlocks)*format.BlockSize])
	for i, g := range segs {
		atomic.StoreUint64(l.tailWord(i), g.Start)
	}
	if err := m.Persist(int64(plog), int64(lay.Header.PBlocks)*format.BlockSize); err != nil {
		return nil, fmt.Errorf("%w: writing the P_log at block %d: %w", ErrNotDurable, lay.Header.PLog, err)
	}
	region := mem[lay.FLog.Off() : lay.FLog.Off()+format.Off(lay.Header.Blocks)*format.BlockSize]
	clear(region)
	lay.Header.Encode(region)
	for i, g := range segs {
		e := lay.Entry(i, g)
		e.Encode(region[format.FLHeader+i*format.FLEntry:])
	}
	if err := m.Persist(int64(lay.FLog.Off()), int64(len(region))); err != nil {
		return nil, fmt.Errorf("%w: writing the F_log at block %d: %w", ErrNotDurable, lay.FLog, err)
	}
	return l, nil
}

// Attach is the log Read found, for the session to go on.
func Attach(m pmem.Medium, st *State) *Log {
	return &Log{m: m, lay: st.Layout, size: st.Size, mode: st.Mode}
}

// Layout is where the log lies.
func (l *Log) Layout() Layout { return l.lay }

// Size is the bytes the session covers.
func (l *Log) Size() uint64 { return l.size }

// Mode is format.SessionWrite or format.SessionRead.
func (l *Log) Mode() uint32 { return l.mode }

// Fields are the inode fields of the open session.
func (l *Log) Fields() Fields {
	return Fields{ProcessNum: uint32(l.lay.Count()), FLog: l.lay.FLog, Size: l.size, Mode: l.mode}
}

// tailWord is segment i's Tail_ptr in the mapping.
func (l *Log) tailWord(i int) *uint64 {
	return (*uint64)(unsafe.Pointer(&l.m.Bytes()[l.lay.TailOff(i)]))
}

// Span is a run of pool bytes [Off, Off+Len).
type Span struct{ Off, Len int64 }

// MoveTail makes segment i's progress up to tail durable. In a write
// session, data lists the pool ranges of the file bytes between the old
// and the new tail: they are flushed and fenced first, and on a failed
// flush the tail does not move (it must not pass data that is not
// durable). Then the 8-byte Tail_ptr is stored and persisted.
func (l *Log) MoveTail(i int, tail uint64, data []Span) error {
	if l.mode == format.SessionWrite {
		var ferr error
		for _, sp := range data {
			if err := l.m.Flush(sp.Off, sp.Len); err != nil && ferr == nil {
				ferr = err
			}
		}
		if err := l.m.Fence(); err != nil && ferr == nil {
			ferr = err
		}
		if ferr != nil {
			return fmt.Errorf("%w: segment %d's data below %d: %w", ErrNotDurable, i, tail, ferr)
		}
	}
	atomic.StoreUint64(l.tailWord(i), tail)
	if err := l.m.Persist(int64(l.lay.TailOff(i)), 8); err != nil {
		// Memory may run ahead of the media here: a crash redoes more.
		return fmt.Errorf("%w: segment %d's Tail_ptr %d: %w", ErrNotDurable, i, tail, err)
	}
	return nil
}

// StageEntry adds segment i's entry, as g says it now is (its Pid
// recorded; or done: P_flag 1, P_log_addr 0), to tx: one 64-byte record.
// The caller commits it.
func (l *Log) StageEntry(tx *journal.Tx, i int, g Segment) {
	var buf [format.FLEntry]byte
	e := l.lay.Entry(i, g)
	e.Encode(buf[:])
	tx.Write(l.lay.EntryOff(i), buf[:])
}
