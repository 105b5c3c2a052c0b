// Package pmem maps a persistent-memory pool and gives it one set of
// persistence primitives, whatever the medium underneath.
//
// A pool is one of:
//
//	kind      what it is                                  how it is mapped            Flush
//	DevDAX    a DAX character device (/dev/daxN.M)        MAP_SHARED                  CLWB/CLFLUSHOPT/CLFLUSH
//	FSDAX     a file on a DAX-mounted file system         MAP_SHARED_VALIDATE|MAP_SYNC CLWB/CLFLUSHOPT/CLFLUSH
//	Emulated  an ordinary (sparse) file, the default      MAP_SHARED                  msync(MS_SYNC) of the pages
//
// The three primitives mean the same thing on every medium:
//
//	Flush(off, n)   write back the cache lines (or pages) covering [off, off+n)
//	Fence()         order: every Flush issued before completes before any later store
//	Persist(off, n) Flush then Fence: [off, off+n) is durable when it returns nil
//
// Flush and Persist return the write-back failure (msync on emulated pools);
// after one, the range's bytes must be assumed lost on media even though
// the mapping still shows them.
//
// Callers store straight into Bytes() and then Persist what must be durable.
// On media, structures hold offsets into Bytes(), never pointers.
package pmem

import (
	"errors"
	"os"
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
	Flush(off, n int64) error
	Fence()
	Persist(off, n int64) error
	Kind() Kind
	// Close unmaps the pool and releases the pool lock.
	Close() error
}

// Sentinel errors.
var (
	// ErrInUse: another process holds the pool lock (a daemon has it mounted,
	// or fsck/recover is running). The wrapping error names the holder's pid.
	ErrInUse = errors.New("pool is in use by another process")
	// ErrExists: Create was asked to overwrite an existing pool without force.
	ErrExists = errors.New("pool already exists")
	// ErrTooSmall: the requested or found size cannot hold a file system.
	ErrTooSmall = errors.New("pool too small")
)

// WritebackErrors is implemented by media that may report a write-back
// failure to a Flush of another range (msync reports the pool file's
// errors since the last check, wherever they happened). The count grows
// with each failure a Flush returned; a caller whose unflushed stores were
// outstanding while it grew must assume they were lost.
type WritebackErrors interface {
	WritebackErrors() uint64
}

// FileBacked is implemented by media whose bytes live in a file's page
// cache (emulated pools). Moving data with pwrite and splice on that file
// lets the kernel's page-cache paths do the work; storing through the
// mapping instead takes a page fault per fresh 4 KiB page, about ten
// times slower here. The mapping and the file stay coherent (one page
// cache). File returns nil when the medium is not file-backed.
type FileBacked interface {
	File() *os.File
}
