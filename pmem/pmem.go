package pmem

import (
	"fmt"
)

// Kind says what backs a Medium.
type Kind int

const (
	Emulated Kind = iota // ordinary file, persisted with msync
	FSDAX                // file on a DAX file system, MAP_SYNC
	DevDAX               // device DAX character device
	Memory               // DRAM only (tests); nothing survives Close
)

func (k Kind) String() string {
	switch k {
	case Emulated:
		return "emulated"
	case FSDAX:
		return "fsdax"
	case DevDAX:
		return "devdax"
	case Memory:
		return "memory"
	}
	return "unknown"
}

// Medium is the seam between the file system and the bytes of the pool.
// Tests swap in a Recorder (crash images) or a faulty wrapper.
type Medium interface {
	// Bytes is the whole pool, mapped. Its length is Size().
	Bytes() []byte
	Size() int64
	// WriteAt stores p at pool offset off, all of it or an error. On an
	// emulated pool it is a pwrite of the pool file: storing through the
	// mapping takes a page fault per fresh 4 KiB page, several times
	// slower there (BenchmarkWriteFresh; the mapping and the file share
	// one page cache). On DAX and memory media it copies into Bytes().
	WriteAt(p []byte, off int64) error
	// Fallocate backs [off, off+n) of a sparse pool file, so that a later
	// store into it cannot kill the process with SIGBUS on a full disk;
	// that case fails with ErrNoSpace. Nothing becomes durable. No-op on
	// DAX and memory media, whose bytes always exist.
	Fallocate(off, n int64) error
	// Punch makes [off, off+n) read as zeros, durably. An emulated pool
	// punches a hole in its file (giving the space back); other media
	// clear and persist.
	Punch(off, n int64) error
	Flush(off, n int64) error
	// Fence fails when the medium cannot promise the flushes before it
	// completed; the caller treats that as a failed Flush of them.
	Fence() error
	Persist(off, n int64) error
	Kind() Kind
	// Close unmaps the pool and releases the pool lock.
	Close() error
}

// WritebackErrors is implemented by media that may report a write-back
// failure to a Flush of another range (msync reports the pool file's
// errors since the last check, wherever they happened). The count grows
// with each failure a Flush returned; a caller whose unflushed stores were
// outstanding while it grew must assume they were lost.
type WritebackErrors interface {
	WritebackErrors() uint64
}

// checkRange refuses [off, off+n) unless it lies within a pool of size
// bytes (n >= 0).
func checkRange(off, n, size int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("[%d, %d) of a %d-byte pool: %w", off, off+n, size, ErrOutOfBounds)
	}
	return nil
}

// PunchByStores is Punch for a medium with no cheaper way: it clears
// [off, off+n) (clamped to the pool) through Bytes and persists it through
// m. A wrapper that records flushes and fences (crash-image tests) uses it
// so the zeros pass through its own Persist.
func PunchByStores(m Medium, off, n int64) error {
	start, end, ok := clampRange(off, n, m.Size())
	if !ok {
		return nil
	}
	clear(m.Bytes()[start:end])
	return m.Persist(start, end-start)
}
