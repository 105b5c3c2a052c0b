package pmem

import "errors"

// ErrInjected is a panic value for crash callbacks: recover can tell an
// injected crash from a real failure.
var ErrInjected = errors.New("pmem: injected fault")

// Sentinel errors.
var (
	// ErrInUse: another process holds the pool lock (a daemon has it mounted,
	// or fsck/recover is running). The wrapping error names the holder's pid.
	ErrInUse = errors.New("pmem: pool is in use by another process")
	// ErrExists: Create was asked to overwrite an existing pool without force.
	ErrExists = errors.New("pmem: pool already exists")
	// ErrTooSmall: the requested or found size cannot hold a file system.
	ErrTooSmall = errors.New("pmem: pool too small")
	// ErrNoSpace: WriteAt or Fallocate found the file system holding the
	// pool file full.
	ErrNoSpace = errors.New("pmem: the file system holding the pool file is full")
	// ErrOutOfBounds: an operation named bytes outside the pool.
	ErrOutOfBounds = errors.New("pmem: range outside the pool")
)

// ErrReadOnly: a store was asked of a medium opened with OpenReadOnly.
var ErrReadOnly = errors.New("pmem: pool is open read-only")
