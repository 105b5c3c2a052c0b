//go:build linux

package pmem

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openMode says how open maps the pool.
type openMode int

const (
	modeReadWrite openMode = iota // Open: O_RDWR, exclusive lock, shared writable map
	modeReadOnly                  // OpenReadOnly: O_RDONLY, shared lock, PROT_READ shared map
	modePrivate                   // OpenPrivate: O_RDONLY, shared lock, copy-on-write map
)

// OpenPrivate opens the pool like OpenReadOnly (O_RDONLY, shared lock: it
// works on a read-only pool file and fails with ErrInUse while a daemon has
// the pool), but maps it copy-on-write: stores into Bytes() succeed and
// stay in this process, and Flush, Fence and Persist do nothing. A command
// that only reports (`dnnfs recover` without --finish or --abandon) can so
// run the mount's recovery and look at the result without one byte
// reaching the pool. Only the pages stored into cost memory.
func OpenPrivate(path string) (Medium, error) { return open(path, modePrivate) }

// zeroUnwritten is Punch for a medium that never writes its file: a private
// map gets fresh anonymous zero pages over the whole pages of the range
// (no copy of what they replace), the partial pages at its ends are
// cleared; a read-only map refuses.
func (m *fileMedium) zeroUnwritten(start, end int64) error {
	if !m.private {
		return fmt.Errorf("%s: zero [%d, %d): %w", m.path, start, end, ErrReadOnly)
	}
	ps := int64(os.Getpagesize())
	lo, hi := (start+ps-1)&^(ps-1), end&^(ps-1)
	if hi <= lo {
		clear(m.data[start:end])
		return nil
	}
	clear(m.data[start:lo])
	clear(m.data[hi:end])
	_, _, errno := unix.Syscall6(unix.SYS_MMAP, uintptr(unsafe.Pointer(&m.data[lo])), uintptr(hi-lo),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE, ^uintptr(0), 0)
	if errno != 0 {
		// The old pages are still mapped: clear them the slow way.
		clear(m.data[lo:hi])
	}
	return nil
}

// checkMappable reserves (and releases) size bytes of address space, so
// that a pool this process could never map is refused before its file is
// created or emptied.
func checkMappable(size int64) error {
	if int64(int(size)) != size {
		return fmt.Errorf("does not fit in the address space")
	}
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("does not fit in this process's address space: %w", err)
	}
	return unix.Munmap(b)
}

// removeIfSame returns a function that removes path if it still names the
// file f was opened on (CreatePool's undo).
func removeIfSame(path string, f *os.File) func() {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return func() {}
	}
	return func() {
		var now unix.Stat_t
		if err := unix.Stat(path, &now); err == nil && now.Dev == st.Dev && now.Ino == st.Ino {
			os.Remove(path)
		}
	}
}
