package format

import "fmt"

// FEntry is a decoded F_log entry.
type FEntry struct {
	Pid      uint32
	PFlag    uint32
	PartHead uint64
	PLength  uint64
	PLogAddr Off
	Next     Off
}

// Encode writes the entry (FLEntry bytes) with its checksum.
func (e *FEntry) Encode(b []byte) {
	b = b[:FLEntry]
	clear(b)
	le.PutUint32(b[FEPid:], e.Pid)
	le.PutUint32(b[FEPFlag:], e.PFlag)
	le.PutUint64(b[FEPartHead:], e.PartHead)
	le.PutUint64(b[FEPLength:], e.PLength)
	le.PutUint64(b[FEPLogAddr:], uint64(e.PLogAddr))
	le.PutUint64(b[FENext:], uint64(e.Next))
	le.PutUint32(b[FECRC:], Checksum(b[:FECRC]))
}

// DecodeFEntry parses an F_log entry.
func DecodeFEntry(b []byte) (FEntry, error) {
	var e FEntry
	if len(b) < FLEntry {
		return e, fmt.Errorf("F_log entry: %w: short buffer", corrupt)
	}
	if got, want := le.Uint32(b[FECRC:]), Checksum(b[:FECRC]); got != want {
		return e, fmt.Errorf("F_log entry: %w (stored %08x, computed %08x)", badChecksum, got, want)
	}
	e.Pid = le.Uint32(b[FEPid:])
	e.PFlag = le.Uint32(b[FEPFlag:])
	e.PartHead = le.Uint64(b[FEPartHead:])
	e.PLength = le.Uint64(b[FEPLength:])
	e.PLogAddr = Off(le.Uint64(b[FEPLogAddr:]))
	e.Next = Off(le.Uint64(b[FENext:]))
	if e.PFlag > 1 {
		return e, fmt.Errorf("F_log entry: %w: P_flag %d", corrupt, e.PFlag)
	}
	return e, nil
}

// FLogHeader is the decoded F_log header.
type FLogHeader struct {
	Count   uint32
	PLog    Blk
	Blocks  uint32
	PBlocks uint32
}

// FLogBlocks returns the region sizes for n segments.
func FLogBlocks(n int) (flog, plog uint32) {
	return uint32((FLHeader + n*FLEntry + BlockSize - 1) / BlockSize), uint32((n*PLogLine + BlockSize - 1) / BlockSize)
}

// Encode writes the header (FLHeader bytes) with its checksum.
func (h *FLogHeader) Encode(b []byte) {
	b = b[:FLHeader]
	clear(b)
	le.PutUint32(b[FLCount:], h.Count)
	le.PutUint64(b[FLPLogBlk:], uint64(h.PLog))
	le.PutUint32(b[FLBlocks:], h.Blocks)
	le.PutUint32(b[FLPBlocks:], h.PBlocks)
	le.PutUint32(b[FLCRC:], Checksum(b[4:24]))
}

// DecodeFLogHeader parses and sanity-checks an F_log header.
func DecodeFLogHeader(b []byte) (FLogHeader, error) {
	var h FLogHeader
	if len(b) < FLHeader {
		return h, fmt.Errorf("F_log: %w: short buffer", corrupt)
	}
	if got, want := le.Uint32(b[FLCRC:]), Checksum(b[4:24]); got != want {
		return h, fmt.Errorf("F_log: %w (stored %08x, computed %08x)", badChecksum, got, want)
	}
	h.Count = le.Uint32(b[FLCount:])
	h.PLog = Blk(le.Uint64(b[FLPLogBlk:]))
	h.Blocks = le.Uint32(b[FLBlocks:])
	h.PBlocks = le.Uint32(b[FLPBlocks:])
	if h.Count < 1 || h.Count > MaxThreads {
		return h, fmt.Errorf("F_log: %w: %d entries", corrupt, h.Count)
	}
	if f, p := FLogBlocks(int(h.Count)); f != h.Blocks || p != h.PBlocks {
		return h, fmt.Errorf("F_log: %w: region sizes %d/%d for %d entries", corrupt, h.Blocks, h.PBlocks, h.Count)
	}
	return h, nil
}

// SessionFields reads the session part of an inode's reserved area.
func (in *Inode) SessionFields() (processNum, fFlag uint32, fLog Blk, size uint64, mode uint32) {
	s := in.Session[:]
	return le.Uint32(s[INProcessNum-INSession:]), le.Uint32(s[INFFlag-INSession:]),
		Blk(le.Uint64(s[INFLogAddr-INSession:])), le.Uint64(s[INSessionSize-INSession:]), le.Uint32(s[INSessionMode-INSession:])
}

// SetSessionFields writes the session part of the reserved area.
func (in *Inode) SetSessionFields(processNum, fFlag uint32, fLog Blk, size uint64, mode uint32) {
	s := in.Session[:]
	le.PutUint32(s[INProcessNum-INSession:], processNum)
	le.PutUint32(s[INFFlag-INSession:], fFlag)
	le.PutUint64(s[INFLogAddr-INSession:], uint64(fLog))
	le.PutUint64(s[INSessionSize-INSession:], size)
	le.PutUint32(s[INSessionMode-INSession:], mode)
}
