//go:build linux

package pmem

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MinSize is the smallest pool Create makes and Open accepts.
const MinSize = 1 << 20

// mapSync is MAP_SYNC. x/sys/unix only defines it on some GOARCHes, but the
// value is the same on every Linux architecture that supports it.
const mapSync = 0x80000

// Create prepares a pool at path.
//
// A regular file is created (or, with force, truncated) to size bytes as a
// sparse file, so a large pool costs no disk until it is written. size must
// be a positive multiple of 4096 and at least MinSize.
//
// A DAX character device is neither created nor truncated; Create only checks
// that it holds at least size bytes (0 means the whole device). A device
// always exists, so it too needs force: it may hold someone's pool.
//
// Create refuses with ErrInUse if a process has the pool open. A file it
// created is removed again if it fails.
func Create(path string, size int64, force bool) error {
	_, err := CreatePool(path, size, force)
	return err
}

// CreatePool is Create that also returns, when it created the file, a
// function that removes it again (only if path still names that file), for
// a caller whose later steps (formatting) fail; undo is nil otherwise.
func CreatePool(path string, size int64, force bool) (undo func(), err error) {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return nil, fmt.Errorf("%s is a directory", path)
	case err == nil && !force:
		return nil, fmt.Errorf("%s: %w (use --force to overwrite)", path, ErrExists)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("create pool: %w", err)
	}
	exists := err == nil

	// Opening and closing the file from this process would drop the lock of
	// a pool this process has open, so refuse before touching it.
	if exists && openHere(st) {
		return nil, fmt.Errorf("%s: %w (open in this process, pid %d)", path, ErrInUse, os.Getpid())
	}
	if exists && st.Mode()&os.ModeCharDevice != 0 {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("create pool: %w", err)
		}
		defer f.Close()
		if err := lockFile(f, path, unix.F_WRLCK); err != nil {
			return nil, err
		}
		have, err := deviceSize(f)
		if err != nil {
			return nil, fmt.Errorf("%s: device size: %w", path, err)
		}
		if size < 0 || have < size || have < MinSize {
			return nil, fmt.Errorf("%s: device holds %d bytes, need %d: %w", path, have, max(size, MinSize), ErrTooSmall)
		}
		return nil, nil
	}

	if size <= 0 || size%4096 != 0 {
		return nil, fmt.Errorf("%s: pool size %d must be a positive multiple of 4096", path, size)
	}
	if size < MinSize {
		return nil, fmt.Errorf("%s: pool size %d is below %d bytes: %w", path, size, MinSize, ErrTooSmall)
	}
	if err := checkMappable(size); err != nil {
		return nil, fmt.Errorf("%s: pool size %d: %w", path, size, err)
	}
	// No O_TRUNC: a running daemon must not see its mapping shrink, so take
	// the lock first and truncate only once we hold it. O_EXCL: a file that
	// appeared since the Stat is not ours to remove.
	flag := os.O_RDWR | os.O_CREATE
	if !exists {
		flag |= os.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if errors.Is(err, os.ErrExist) && !force {
		return nil, fmt.Errorf("%s: %w (use --force to overwrite)", path, ErrExists)
	} else if errors.Is(err, os.ErrExist) {
		exists = true
		f, err = os.OpenFile(path, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	defer f.Close()
	var remove func()
	if !exists {
		remove = removeIfSame(path, f)
		defer func() {
			if err != nil {
				remove()
			}
		}()
	}
	if err := lockFile(f, path, unix.F_WRLCK); err != nil {
		return nil, err
	}
	// Try the size before emptying the file: a file system that cannot hold
	// it (EFBIG) fails here with an existing file unchanged (growing a file
	// that the next steps empty anyway changes nothing that matters).
	if err := f.Truncate(size); err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	// Truncate to 0 first so no old pool survives in the new one, then extend:
	// ftruncate allocates nothing, the file stays sparse.
	if err := f.Truncate(0); err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	return remove, nil
}

// Open maps the pool at path read-write and holds an exclusive lock on it
// until Close. If another process holds the pool it fails with ErrInUse,
// naming that process.
//
// The lock is a POSIX record lock, which belongs to the process and is
// dropped when the process closes ANY descriptor of the file. Open therefore
// also refuses a second open of the same pool within this process, and
// nothing else in the process should open the pool file directly.
func Open(path string) (Medium, error) { return open(path, modeReadWrite) }

// OpenReadOnly maps the pool read-only under a shared lock, for inspection
// (fsck without repair). It fails with ErrInUse while a daemon has the pool
// open read-write. Flush, Fence and Persist do nothing on it, and storing
// into Bytes() faults. The mapping is shared, so nothing is copied: a pool
// larger than RAM opens.
func OpenReadOnly(path string) (Medium, error) { return open(path, modeReadOnly) }

// fileMedium is a pool mapped from a file or a DAX device.
type fileMedium struct {
	path     string
	f        *os.File
	data     []byte
	kind     Kind
	readOnly bool // the pool file is never written
	private  bool // readOnly, but stores into data succeed and stay in this process
	key      fileKey
	fd       int // f's descriptor

	errMu    sync.Mutex
	flushErr error         // first msync failure; returned by Close and Err
	wbErrs   atomic.Uint64 // msync failures so far (read on every write: no lock)

	closeMu sync.Mutex
	closed  bool

	// Early write-back (emulated pools written through the file): ranges
	// of large WriteAts for the write-back goroutine; see kickWriteback.
	wbq            chan wbRange
	wbStop, wbDone chan struct{}
}

// wbRange is a byte range [off, off+n) of the pool.
type wbRange struct{ off, n int64 }

// fileKey identifies an open pool within this process (see Open).
type fileKey struct{ dev, ino uint64 }

var (
	openMu    sync.Mutex
	openPools = map[fileKey]bool{}
)

func openHere(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	openMu.Lock()
	defer openMu.Unlock()
	return openPools[fileKey{uint64(st.Dev), st.Ino}]
}

func open(path string, mode openMode) (_ Medium, err error) {
	readOnly := mode != modeReadWrite
	flag, lock, prot := os.O_RDWR, int16(unix.F_WRLCK), unix.PROT_READ|unix.PROT_WRITE
	share := unix.MAP_SHARED
	switch mode {
	case modeReadOnly:
		flag, lock, prot = os.O_RDONLY, unix.F_RDLCK, unix.PROT_READ
	case modePrivate:
		// Copy-on-write without reserving the whole size: only the pages
		// stored into cost memory (see OpenPrivate).
		flag, lock, share = os.O_RDONLY, unix.F_RDLCK, unix.MAP_PRIVATE|unix.MAP_NORESERVE
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()

	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("open pool %s: %w", path, err)
	}
	key := fileKey{uint64(st.Dev), st.Ino}
	// Checked before locking: locking again from this process would silently
	// convert our own lock instead of failing.
	openMu.Lock()
	if openPools[key] {
		openMu.Unlock()
		return nil, fmt.Errorf("%s: %w (already open in this process, pid %d)", path, ErrInUse, os.Getpid())
	}
	openPools[key] = true
	openMu.Unlock()
	defer func() {
		if err != nil {
			openMu.Lock()
			delete(openPools, key)
			openMu.Unlock()
		}
	}()

	if err := lockFile(f, path, lock); err != nil {
		return nil, err
	}

	m := &fileMedium{path: path, f: f, fd: int(f.Fd()), readOnly: readOnly, private: mode == modePrivate, key: key}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		size, err := deviceSize(f)
		if err != nil {
			return nil, fmt.Errorf("%s: device size: %w", path, err)
		}
		if size < MinSize {
			return nil, fmt.Errorf("%s: device holds %d bytes, need %d: %w", path, size, MinSize, ErrTooSmall)
		}
		if m.data, err = mmap(f, size, prot, share); err != nil {
			return nil, fmt.Errorf("%s: map device: %w", path, err)
		}
		m.kind = DevDAX
	case unix.S_IFREG:
		if st.Size < MinSize {
			return nil, fmt.Errorf("%s: file holds %d bytes, need %d: %w", path, st.Size, MinSize, ErrTooSmall)
		}
		// MAP_SYNC keeps file metadata durable at page fault, so flushing
		// cache lines is enough; only DAX file systems accept it.
		m.kind = Emulated
		if readOnly {
			m.data, err = mmap(f, st.Size, prot, share)
		} else {
			m.data, err = mmap(f, st.Size, prot, unix.MAP_SHARED_VALIDATE|mapSync)
			m.kind = FSDAX
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				m.data, err = mmap(f, st.Size, prot, unix.MAP_SHARED)
				m.kind = Emulated
			}
		}
		if m.kind == Emulated && !readOnly && !inMemoryFS(f) {
			m.wbq, m.wbStop, m.wbDone = make(chan wbRange, writebackQueue), make(chan struct{}), make(chan struct{})
			go m.writeback()
		}
		if err != nil {
			return nil, fmt.Errorf("%s: map file: %w", path, err)
		}
	default:
		return nil, fmt.Errorf("%s: not a regular file or DAX character device", path)
	}
	return m, nil
}

func mmap(f *os.File, size int64, prot, flags int) ([]byte, error) {
	if int64(int(size)) != size {
		return nil, fmt.Errorf("size %d does not fit in the address space", size)
	}
	return unix.Mmap(int(f.Fd()), 0, int(size), prot, flags)
}

// lockFile takes a whole-file POSIX record lock without waiting.
func lockFile(f *os.File, path string, typ int16) error {
	for try := 0; ; try++ {
		lk := unix.Flock_t{Type: typ, Whence: io.SeekStart}
		err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			return fmt.Errorf("%s: lock pool: %w", path, err)
		}
		lk = unix.Flock_t{Type: typ, Whence: io.SeekStart}
		if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
			return fmt.Errorf("%s: lock pool: %w", path, err)
		}
		// F_UNLCK: the holder let go between the two calls; try again once.
		if lk.Type != unix.F_UNLCK || try > 0 {
			return fmt.Errorf("%s: %w (pid %d holds it; unmount that daemon first)", path, ErrInUse, lk.Pid)
		}
	}
}

// deviceSize reads a character device's size from sysfs (device DAX
// publishes it there), else by seeking to its end.
func deviceSize(f *os.File) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	rdev := uint64(st.Rdev)
	p := fmt.Sprintf("/sys/dev/char/%d:%d/size", unix.Major(rdev), unix.Minor(rdev))
	if b, err := os.ReadFile(p); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
			return n, nil
		}
	}
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	return n, nil
}

func (m *fileMedium) Bytes() []byte { return m.data }
func (m *fileMedium) Size() int64   { return int64(len(m.data)) }
func (m *fileMedium) Kind() Kind    { return m.kind }

// Flush writes back [off, off+n), clamped to the pool. DAX media use a cache
// line flush instruction; emulated pools msync the pages covering the range.
// An msync failure is returned (and counted, see WritebackErrors): the
// kernel reports the pool file's write-back errors once, to whichever msync
// comes next, so it may stem from pages outside [off, off+n).
// Safe for concurrent use; must not be called after Close.
func (m *fileMedium) Flush(off, n int64) error {
	start, end, ok := clampRange(off, n, int64(len(m.data)))
	if !ok || m.readOnly {
		return nil
	}
	if m.kind != Emulated && cpuFlush {
		flushCPU(unsafe.Pointer(&m.data[start]), uintptr(end-start))
		return nil
	}
	ps := int64(os.Getpagesize())
	start &^= ps - 1
	end = min((end+ps-1)&^(ps-1), int64(len(m.data)))
	if err := unix.Msync(m.data[start:end], unix.MS_SYNC); err != nil {
		err = fmt.Errorf("%s: msync [%d, %d): %w", m.path, start, end, err)
		m.noteFlushErr(err)
		return err
	}
	return nil
}

// WritebackErrors counts the msync failures so far (see pmem.WritebackErrors).
func (m *fileMedium) WritebackErrors() uint64 { return m.wbErrs.Load() }

// Fence orders earlier flushes before later stores. msync has already
// waited for the write-back, so only DAX media need an instruction, which
// cannot fail.
func (m *fileMedium) Fence() error {
	if m.kind != Emulated && !m.readOnly {
		sfence()
	}
	return nil
}

func (m *fileMedium) Persist(off, n int64) error {
	err := m.Flush(off, n)
	if ferr := m.Fence(); err == nil {
		err = ferr
	}
	return err
}

// WriteAt stores p at off: a pwrite of the pool file on an emulated pool
// (see Medium.WriteAt for why), a copy into the mapping otherwise. A
// private map (OpenPrivate) takes the copy in this process only; a
// read-only one refuses. A large pwrite also starts its write-back (see
// kickWriteback).
func (m *fileMedium) WriteAt(p []byte, off int64) error {
	if err := checkRange(off, int64(len(p)), int64(len(m.data))); err != nil {
		return fmt.Errorf("%s: write: %w", m.path, err)
	}
	if m.readOnly && !m.private {
		return fmt.Errorf("%s: write [%d, %d): %w", m.path, off, off+int64(len(p)), ErrReadOnly)
	}
	if m.kind != Emulated || m.readOnly {
		copy(m.data[off:], p)
		return nil
	}
	if _, err := m.f.WriteAt(p, off); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("%s: write [%d, %d): %w", m.path, off, off+int64(len(p)), ErrNoSpace)
		}
		return fmt.Errorf("%s: write [%d, %d): %w", m.path, off, off+int64(len(p)), err)
	}
	if len(p) >= writebackMin {
		m.kickWriteback(off, int64(len(p)))
	}
	return nil
}

// Early write-back: a WriteAt of at least writebackMin bytes into an
// emulated pool hands its range to a goroutine that starts the write-back
// of its pages at once (sync_file_range SYNC_FILE_RANGE_WRITE), as the
// kernel's flusher would for a file past its dirty threshold. The msync of
// the fsync that follows then finds most pages written or under way
// instead of writing them all itself; a big file's fsync on a disk pool
// took as long as writing it (DESIGN.md §An fsync). The writer never
// waits for the disk: when the queue is full the range is left to the
// flush.
const (
	writebackMin   = 128 << 10
	writebackQueue = 64
)

func (m *fileMedium) kickWriteback(off, n int64) {
	if m.wbq == nil {
		return
	}
	select {
	case m.wbq <- wbRange{off, n}:
	default:
	}
}

// inMemoryFS tells whether f lives on a file system whose pages are its
// storage (tmpfs, ramfs): nothing to write back early.
func inMemoryFS(f *os.File) bool {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return false
	}
	return sfs.Type == unix.TMPFS_MAGIC || sfs.Type == unix.RAMFS_MAGIC
}

// writeback starts the write-back of queued ranges until Close, merging
// ranges that touch.
func (m *fileMedium) writeback() {
	defer close(m.wbDone)
	for {
		var r wbRange
		select {
		case r = <-m.wbq:
		case <-m.wbStop:
			return
		}
	merge:
		for {
			select {
			case q := <-m.wbq:
				if q.off == r.off+r.n {
					r.n += q.n
					continue
				}
				m.startWriteback(r)
				r = q
			default:
				break merge
			}
		}
		m.startWriteback(r)
	}
}

// startWriteback starts writing back r of the pool file without waiting.
// A failure of the I/O reaches the next msync (the pool file's write-back
// error). A failure returned here counts as a write-back failure (see
// WritebackErrors): the kernel may have given up on the pages and cleaned
// them, and then no later msync would report it.
func (m *fileMedium) startWriteback(r wbRange) {
	if err := unix.SyncFileRange(m.fd, r.off, r.n, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		m.noteFlushErr(fmt.Errorf("%s: start write-back of [%d, %d): %w", m.path, r.off, r.off+r.n, err))
	}
}

// noteFlushErr records a failed write-back: the first is kept for Err and
// Close, and every one is counted.
func (m *fileMedium) noteFlushErr(err error) {
	m.errMu.Lock()
	if m.flushErr == nil {
		m.flushErr = err
	}
	m.errMu.Unlock()
	m.wbErrs.Add(1)
}

// Fallocate backs [off, off+n) of an emulated pool's sparse file (clamped
// to the pool); DAX media and private maps need nothing. A read-only map
// refuses.
func (m *fileMedium) Fallocate(off, n int64) error {
	start, end, ok := clampRange(off, n, int64(len(m.data)))
	if !ok || m.private {
		return nil
	}
	if m.readOnly {
		return fmt.Errorf("%s: fallocate [%d, %d): %w", m.path, start, end, ErrReadOnly)
	}
	if m.kind != Emulated {
		return nil
	}
	if err := unix.Fallocate(int(m.f.Fd()), 0, start, end-start); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("%s: fallocate [%d, %d): %w", m.path, start, end, ErrNoSpace)
		}
		return fmt.Errorf("%s: fallocate [%d, %d): %w", m.path, start, end, err)
	}
	return nil
}

// Punch makes [off, off+n) read as zeros, durably. On an emulated pool it
// punches a hole in the file, which also gives the space back; DAX media
// (and a file system that cannot punch) clear and flush. A private map
// (OpenPrivate) is cleared in this process only; a read-only one refuses.
func (m *fileMedium) Punch(off, n int64) error {
	start, end, ok := clampRange(off, n, int64(len(m.data)))
	if !ok {
		return nil
	}
	if m.readOnly {
		return m.zeroUnwritten(start, end)
	}
	if m.kind == Emulated {
		err := unix.Fallocate(int(m.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, start, end-start)
		if err == nil {
			return nil
		}
	}
	clear(m.data[start:end])
	return m.Persist(start, end-start)
}

// Backed calls fn for each piece of [off, off+n) that an emulated pool's
// file holds storage for (SEEK_DATA/SEEK_HOLE; the rest are holes, as
// Punch leaves them). Other media hold every byte: fn gets it all. A
// read-only or private map reports nothing: its process gives no storage
// back to the file.
func (m *fileMedium) Backed(off, n int64, fn func(off, n int64)) error {
	start, end, ok := clampRange(off, n, int64(len(m.data)))
	if !ok || m.readOnly {
		return nil
	}
	if m.kind != Emulated {
		fn(start, end-start)
		return nil
	}
	fd := int(m.f.Fd())
	for start < end {
		d, err := unix.Seek(fd, start, unix.SEEK_DATA)
		if err == unix.ENXIO || (err == nil && d >= end) {
			return nil // holes to the end
		}
		if err != nil {
			return fmt.Errorf("%s: SEEK_DATA from %d: %w", m.path, start, err)
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("%s: SEEK_HOLE from %d: %w", m.path, d, err)
		}
		h = min(h, end)
		fn(d, h-d)
		start = h
	}
	return nil
}

// Err reports the first failed write-back (msync) since Open, if any;
// Close returns it too, so unmount tells of a failure even if every
// caller reported its own.
func (m *fileMedium) Err() error {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return m.flushErr
}

// Close unmaps the pool and closes the file, which releases the lock.
// Calling it again does nothing.
func (m *fileMedium) Close() error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	if m.wbStop != nil {
		close(m.wbStop)
		<-m.wbDone
	}
	errs := []error{m.Err()}
	if m.data != nil {
		if err := unix.Munmap(m.data); err != nil {
			errs = append(errs, fmt.Errorf("%s: unmap: %w", m.path, err))
		}
		m.data = nil
	}
	if err := m.f.Close(); err != nil {
		errs = append(errs, fmt.Errorf("%s: close: %w", m.path, err))
	}
	openMu.Lock()
	delete(openPools, m.key)
	openMu.Unlock()
	return errors.Join(errs...)
}
