package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// XattrSession starts (set), reports (get) and abandons (remove) a
	// session.
	XattrSession = "user.dnnfs.session"
	// xattrLocks exists on every file of a dnnfs mount: it tells a dnnfs
	// file from a file elsewhere (where setting XattrSession would just
	// store an ordinary attribute).
	xattrLocks = "user.dnnfs.locks"
	// XattrSource is an ordinary xattr where SaveWith stores
	// Options.Source before it starts a session: a later save of another
	// source does not resume a session that belongs to this one.
	XattrSource = "user.dnnfs-save.source"

	// ChunkSize is the size of one pwrite/pread (the mount's max_write).
	ChunkSize = 1 << 20
	// DefaultThreads is used when threads is 0.
	DefaultThreads = 4
	// MaxThreads is the file system's limit on segments per session.
	MaxThreads = 1024
	// segAlign is the segment alignment (the pool block size): a session
	// needs at least one aligned block per thread.
	segAlign = 4096
	// closeWait bounds the wait for the session to close after the last
	// byte: a read's progress is recorded after its reply reaches the
	// kernel, so the reader may see its data a moment before that.
	closeWait = 5 * time.Second
)

// Stats says what a Save or Load did.
type Stats struct {
	Size    int64         // file size
	Threads int           // segments (= threads) of the session; 1 and no session for files under 4 KiB
	Bytes   int64         // bytes this call wrote (Save) or read (Load)
	Skipped int64         // bytes already done by an interrupted earlier call, not redone
	Resumed bool          // an open session was resumed
	Elapsed time.Duration // wall time of the call
	Tracked bool          // a session tracked the transfer (false: file under 4 KiB, or a load without permission to start one)
}

// Segment is one segment of a session, as the file system reports it.
type Segment struct {
	Index  int    `json:"index"`
	Start  int64  `json:"start"`
	Length int64  `json:"length"`
	Tail   int64  `json:"tail"` // resume offset: [Start, Tail) is done and durable
	Done   bool   `json:"done"`
	Pid    uint32 `json:"pid"` // thread that did the segment's first I/O
}

// End is the offset after the segment.
func (s Segment) End() int64 { return s.Start + s.Length }

// Session is the state of an open session (the JSON of user.dnnfs.session).
type Session struct {
	Threads  int       `json:"threads"`
	Size     int64     `json:"size"`
	Mode     string    `json:"mode"` // "write" or "read"
	Done     bool      `json:"done"`
	Segments []Segment `json:"segments"`
}

// Remaining is the number of bytes the session still has to do.
func (s *Session) Remaining() int64 {
	var n int64
	for _, g := range s.Segments {
		n += g.End() - g.Tail
	}
	return n
}

// SegmentError is a failure inside one segment.
type SegmentError struct {
	Path    string
	Op      string // "write", "read source", "read", "write destination"
	Segment int
	Offset  int64
	Err     error
}

func (e *SegmentError) Error() string {
	return fmt.Sprintf("%s: segment %d: %s at offset %d: %v", e.Path, e.Segment, e.Op, e.Offset, e.Err)
}

func (e *SegmentError) Unwrap() error { return e.Err }

// Options tune SaveWith and LoadWith.
type Options struct {
	// Threads is the number of segments and threads; 0 means
	// DefaultThreads. It is lowered to what the size allows (one 4 KiB
	// block per thread at least) and to MaxThreads.
	Threads int
	// Source identifies what is being saved (e.g. a source file's path,
	// inode, size and mtime). When set, it is stored on the file before a
	// session starts, and an open session whose stored source differs is
	// abandoned instead of resumed: resuming it would mix two sources.
	// Empty: any open write session of the same size and thread count is
	// resumed.
	Source string
}

// Save writes size bytes of src to path (created if missing) from
// threads threads, one segment each, through a write session; 0 threads
// means DefaultThreads. If path has an open write session of the same
// size and thread count (an interrupted Save), only what it has not done
// is written: each unfinished segment from its persisted tail. The file is
// fsync'ed and the session must have closed by itself, or Save fails
// naming the unfinished segment.
func Save(path string, src io.ReaderAt, size int64, threads int) (Stats, error) {
	return SaveWith(path, src, size, Options{Threads: threads})
}

// SaveWith is Save with Options.
func SaveWith(path string, src io.ReaderAt, size int64, opt Options) (Stats, error) {
	start := time.Now()
	st := Stats{Size: size}
	if size < 0 {
		return st, fmt.Errorf("%s: save: negative size %d", path, size)
	}
	threads, err := effectiveThreads(opt.Threads, size)
	if err != nil {
		return st, fmt.Errorf("%s: save: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	created := false
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		created = err == nil
	}
	if err != nil {
		return st, fmt.Errorf("save: %w", err)
	}
	defer f.Close()
	if err := checkDnnfs(f); err != nil {
		if created {
			os.Remove(path) // leave nothing behind outside dnnfs
		}
		return st, err
	}
	sess, err := fileSession(f)
	if err != nil {
		return st, err
	}
	if sess != nil && opt.Source != "" && sess.Mode == "write" {
		if stored, _ := getXattr(f, XattrSource); string(stored) != opt.Source {
			// The open session saves something else: resuming it would
			// mix two sources.
			if err := removeSession(f); err != nil {
				return st, err
			}
			sess = nil
		}
	}
	if sess != nil && sess.Mode == "write" {
		// A truncate while the session was open (open(O_TRUNC) by
		// another writer, say) dropped data its tails still count as
		// done: such a session cannot be trusted.
		if cur, err := fileSize(f); err == nil && cur != sess.Size {
			if err := removeSession(f); err != nil {
				return st, err
			}
			sess = nil
		}
	}
	if threads == 0 { // under one block: no session, one small write
		if sess != nil {
			return st, conflict(f.Name(), sess, "write", 0, size)
		}
		return saveSmall(f, src, size, st, start)
	}
	st.Threads, st.Tracked = threads, true
	switch {
	case sess == nil:
		if err := setSource(f, opt.Source); err != nil {
			return st, err
		}
		if sess, err = startSession(f, threads, size, "write"); err != nil {
			return st, err
		}
	case sess.Mode == "write" && sess.Size == size && sess.Threads == threads:
		st.Resumed = true
	default:
		return st, conflict(f.Name(), sess, "write", threads, size)
	}
	n, skipped, err := runSegments(f, sess, func(buf []byte, off int64) (string, error) {
		k, err := src.ReadAt(buf, off)
		if k == len(buf) {
			err = nil // io.EOF with the last byte is fine
		} else if err == nil || err == io.EOF {
			err = fmt.Errorf("source has only %d bytes, %d expected: %w", off+int64(k), size, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return "read source", err
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			return "write", err
		}
		return "", nil
	})
	st.Bytes, st.Skipped = n, skipped
	st.Elapsed = time.Since(start)
	if err != nil {
		return st, err
	}
	if err := f.Sync(); err != nil {
		return st, fmt.Errorf("%s: fsync: %w", f.Name(), err)
	}
	if err := waitClosed(f, "write"); err != nil {
		return st, err
	}
	st.Elapsed = time.Since(start)
	return st, nil
}

func saveSmall(f *os.File, src io.ReaderAt, size int64, st Stats, start time.Time) (Stats, error) {
	buf := make([]byte, size)
	if k, err := src.ReadAt(buf, 0); k != len(buf) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return st, fmt.Errorf("%s: reading the source at offset %d: %w", f.Name(), k, err)
	}
	if err := f.Truncate(size); err != nil {
		return st, fmt.Errorf("%s: truncate to %d: %w", f.Name(), size, err)
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		return st, fmt.Errorf("%s: write at offset 0: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return st, fmt.Errorf("%s: fsync: %w", f.Name(), err)
	}
	st.Threads, st.Bytes, st.Elapsed = 1, size, time.Since(start)
	return st, nil
}

// loads remembers the read sessions this process is filling, by file and
// destination: only those may be resumed, because only there do the bytes
// before the tails already sit in dst.
var loads = loadSet{m: map[loadKey]bool{}}

type loadSet struct {
	mu sync.Mutex
	m  map[loadKey]bool
}

func (l *loadSet) has(k loadKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[k]
}

// set records (on) or forgets (off) that this process fills k's session.
func (l *loadSet) set(k loadKey, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on {
		l.m[k] = true
	} else {
		delete(l.m, k)
	}
}

type loadKey struct {
	path    string
	ino     uint64
	size    int64
	threads int
	dst     any
}

func newLoadKey(f *os.File, size int64, threads int, dst io.WriterAt) (loadKey, bool) {
	var s unix.Stat_t
	if unix.Fstat(int(f.Fd()), &s) != nil {
		return loadKey{}, false
	}
	abs, err := filepath.Abs(f.Name())
	if err != nil {
		return loadKey{}, false
	}
	k := loadKey{path: abs, ino: s.Ino, size: size, threads: threads}
	if t := reflect.TypeOf(dst); t == nil || !t.Comparable() || t.Kind() != reflect.Pointer {
		return k, false // no identity: never resumed
	}
	k.dst = dst
	return k, true
}

// Load reads the whole file at path into dst[0:size) from threads
// threads, one segment each, through a read session; 0 threads means
// DefaultThreads. If this process was loading the same file into the same
// dst (a pointer) when that Load was interrupted (e.g. the daemon
// restarted), only the unread parts are read: each unfinished segment
// from its tail. An open read session of another process, or of another
// dst, is stale — its progress is not in dst — and is abandoned and
// restarted. Load refuses a file with an unfinished write session.
func Load(path string, dst io.WriterAt, threads int) (Stats, error) {
	return LoadWith(path, dst, Options{Threads: threads})
}

// LoadWith is Load with Options (Source is ignored).
func LoadWith(path string, dst io.WriterAt, opt Options) (Stats, error) {
	start := time.Now()
	var st Stats
	f, err := os.Open(path)
	if err != nil {
		return st, fmt.Errorf("load: %w", err)
	}
	defer f.Close()
	size, threads, sess, err := loadPlan(path, f, opt)
	st.Size = size
	if err != nil {
		return st, err
	}
	copyAt := loadCopier(f, dst, size)
	if threads == 0 {
		if sess != nil {
			return st, conflict(path, sess, "read", 0, size)
		}
		n, _, err := runSegments(f, &Session{Size: size, Segments: []Segment{{Length: size}}}, copyAt)
		st.Threads, st.Bytes, st.Elapsed = 1, n, time.Since(start)
		return st, err
	}
	st.Threads = threads
	key, keyed := newLoadKey(f, size, threads, dst)
	sess, st.Resumed, st.Tracked, err = loadSession(path, f, sess, size, threads, keyed && loads.has(key))
	if err != nil {
		return st, err
	}
	if st.Tracked && keyed {
		loads.set(key, true)
	}
	n, skipped, err := runSegments(f, sess, copyAt)
	st.Bytes, st.Skipped, st.Elapsed = n, skipped, time.Since(start)
	if err != nil {
		var se *SegmentError
		if keyed && errors.As(err, &se) && se.Op != "read" {
			// A chunk the file system counted as read did not reach
			// dst: the tails overstate what dst holds.
			loads.set(key, false)
		}
		return st, err
	}
	if st.Tracked {
		if err := waitClosed(f, "read"); err != nil {
			return st, err
		}
		if keyed {
			loads.set(key, false)
		}
	}
	st.Elapsed = time.Since(start)
	return st, nil
}

// loadPlan checks that f is a dnnfs file with no unfinished write
// session and returns its size, the thread count a load uses and its
// read session, if any.
func loadPlan(path string, f *os.File, opt Options) (size int64, threads int, sess *Session, err error) {
	if err := checkDnnfs(f); err != nil {
		return 0, 0, nil, err
	}
	size, err = fileSize(f)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("load: %w", err)
	}
	threads, err = effectiveThreads(opt.Threads, size)
	if err != nil {
		return size, 0, nil, fmt.Errorf("%s: load: %w", path, err)
	}
	sess, err = fileSession(f)
	if err != nil {
		return size, 0, nil, err
	}
	if sess != nil && sess.Mode == "write" {
		return size, 0, nil, fmt.Errorf("%s: %w (%d of %d bytes left to write; resume the save, or abandon it with setfattr -x %s)",
			path, ErrIncomplete, sess.Remaining(), sess.Size, XattrSession)
	}
	return size, threads, sess, nil
}

// loadCopier returns the per-chunk step of a load: read [off, off+len)
// of f into dst at the same offset. Its string names the failed side.
func loadCopier(f *os.File, dst io.WriterAt, size int64) func(buf []byte, off int64) (string, error) {
	return func(buf []byte, off int64) (string, error) {
		k, err := f.ReadAt(buf, off)
		if k < len(buf) {
			if err == nil || err == io.EOF {
				err = fmt.Errorf("file ended at %d, %d expected: %w", off+int64(k), size, io.ErrUnexpectedEOF)
			}
			return "read", err
		}
		if _, err := dst.WriteAt(buf, off); err != nil {
			return "write destination", err
		}
		return "", nil
	}
}

// loadSession decides which read session a threaded load runs under:
// this process's interrupted load of the same dst resumes; a session
// another process or buffer left is abandoned (what it read is not in
// dst); otherwise a new one starts, or, when the caller may not set the
// session xattr, the load runs untracked on the same split.
func loadSession(path string, f *os.File, sess *Session, size int64, threads int, mine bool) (_ *Session, resumed, tracked bool, err error) {
	switch {
	case sess != nil && sess.Size == size && sess.Threads == threads && mine:
		return sess, true, true, nil
	case sess != nil && !mine:
		if err := removeSession(f); err != nil {
			return nil, false, false, err
		}
	case sess != nil:
		return nil, false, false, conflict(path, sess, "read", threads, size)
	}
	sess, err = startSession(f, threads, size, "read")
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS) {
		// Starting a session sets an xattr, which needs write
		// permission: load the file untracked.
		return splitLike(size, threads), false, false, nil
	}
	if err != nil {
		return nil, false, false, err
	}
	return sess, false, true, nil
}

// splitLike splits size into threads segments the way the file system
// does (for an untracked load).
func splitLike(size int64, threads int) *Session {
	segLen := size / int64(threads) / segAlign * segAlign
	s := &Session{Threads: threads, Size: size, Mode: "read"}
	for i := 0; i < threads; i++ {
		g := Segment{Index: i, Start: int64(i) * segLen, Length: segLen}
		if i == threads-1 {
			g.Length = size - g.Start
		}
		g.Tail = g.Start
		s.Segments = append(s.Segments, g)
	}
	return s
}

// effectiveThreads clamps the thread count to what a session of size
// bytes allows; 0 means the file is too small for a session.
func effectiveThreads(threads int, size int64) (int, error) {
	if threads < 0 {
		return 0, fmt.Errorf("threads %d: want 0 (default) or more", threads)
	}
	if threads == 0 {
		threads = DefaultThreads
	}
	return int(min(int64(threads), MaxThreads, size/segAlign)), nil
}

// runSegments runs one goroutine per unfinished segment of sess, each on
// its own OS thread, doing [tail, end) in ChunkSize steps in order with
// do(buf, off). It returns the bytes done and the bytes skipped (before
// the tails); the first failure stops the others.
func runSegments(f *os.File, sess *Session, do func(buf []byte, off int64) (string, error)) (done, skipped int64, err error) {
	var (
		wg       sync.WaitGroup
		n        atomic.Int64
		stop     atomic.Bool
		errOnce  sync.Once
		firstErr error
	)
	for _, g := range sess.Segments {
		tail := g.Tail
		if g.Done {
			tail = g.End()
		}
		skipped += tail - g.Start
		if tail >= g.End() {
			continue
		}
		wg.Add(1)
		go func(g Segment, from int64) {
			defer wg.Done()
			// One OS thread per segment: the file system identifies a
			// segment's owner by the thread that does its I/O.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			buf := make([]byte, ChunkSize)
			for off := from; off < g.End() && !stop.Load(); {
				k := min(int64(ChunkSize), g.End()-off)
				if op, err := do(buf[:k], off); err != nil {
					errOnce.Do(func() {
						firstErr = &SegmentError{Path: f.Name(), Op: op, Segment: g.Index, Offset: off, Err: err}
					})
					stop.Store(true)
					return
				}
				off += k
				n.Add(k)
			}
		}(g, tail)
	}
	wg.Wait()
	return n.Load(), skipped, firstErr
}

// waitClosed checks that the session closed by itself once every byte was
// done, and names the segments that did not finish if it did not.
func waitClosed(f *os.File, mode string) error {
	deadline := time.Now().Add(closeWait)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		sess, err := fileSession(f)
		if err != nil {
			return err
		}
		if sess == nil {
			return nil
		}
		if time.Now().After(deadline) {
			var open []string
			for _, g := range sess.Segments {
				if !g.Done {
					open = append(open, fmt.Sprintf("segment %d [%d, %d) at tail %d", g.Index, g.Start, g.End(), g.Tail))
				}
			}
			return fmt.Errorf("%s: every byte was %s but the %s session is still open: %s unfinished",
				f.Name(), map[string]string{"write": "written", "read": "read"}[mode], sess.Mode, strings.Join(open, ", "))
		}
		time.Sleep(delay)
	}
}

func checkDnnfs(f *os.File) error {
	if _, err := getXattr(f, xattrLocks); err != nil {
		return fmt.Errorf("%s: %w (reading %s: %v)", f.Name(), ErrNotDnnfs, xattrLocks, err)
	}
	return nil
}

// getXattr reads an xattr of f, growing the buffer as needed.
func getXattr(f *os.File, name string) ([]byte, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Fgetxattr(int(f.Fd()), name, buf)
		if errors.Is(err, unix.ERANGE) {
			sz, err2 := unix.Fgetxattr(int(f.Fd()), name, nil)
			if err2 != nil {
				return nil, err2
			}
			buf = make([]byte, max(sz, 2*len(buf)))
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// fileSession returns the open session of f, or nil.
func fileSession(f *os.File) (*Session, error) {
	b, err := getXattr(f, XattrSession)
	if errors.Is(err, unix.ENODATA) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: reading %s: %w", f.Name(), XattrSession, err)
	}
	var s Session
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: bad %s value %q: %w", f.Name(), XattrSession, b, err)
	}
	return &s, nil
}

// fileSize returns f's size from the file system, not the kernel's
// attribute cache.
func fileSize(f *os.File) (int64, error) {
	var sx unix.Statx_t
	err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_STATX_FORCE_SYNC, unix.STATX_SIZE, &sx)
	if err == nil {
		return int64(sx.Size), nil
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// GetSession returns the open session of the file at path, or nil if none
// is open.
func GetSession(path string) (*Session, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := checkDnnfs(f); err != nil {
		return nil, err
	}
	return fileSession(f)
}

// Abandon drops the open session of the file at path (the data stays as
// it is). It fails with unix.ENODATA if none is open.
func Abandon(path string) error {
	if err := unix.Removexattr(path, XattrSession); err != nil {
		return fmt.Errorf("%s: abandoning the session: %w", path, err)
	}
	return nil
}

func startSession(f *os.File, threads int, size int64, mode string) (*Session, error) {
	v := "threads=" + strconv.Itoa(threads) + ",size=" + strconv.FormatInt(size, 10) + ",mode=" + mode
	if err := unix.Fsetxattr(int(f.Fd()), XattrSession, []byte(v), 0); err != nil {
		return nil, fmt.Errorf("%s: starting a %s session (setxattr %s=%q): %w", f.Name(), mode, XattrSession, v, err)
	}
	sess, err := fileSession(f)
	if err != nil {
		return nil, err
	}
	if sess == nil || sess.Mode != mode || sess.Size != size || sess.Threads != threads {
		return nil, fmt.Errorf("%s: the %s session just started is not there (got %+v)", f.Name(), mode, sess)
	}
	return sess, nil
}

func removeSession(f *os.File) error {
	err := unix.Fremovexattr(int(f.Fd()), XattrSession)
	if err != nil && !errors.Is(err, unix.ENODATA) {
		return fmt.Errorf("%s: abandoning a stale session: %w", f.Name(), err)
	}
	return nil
}

// setSource records (or clears) the source a write session is for.
func setSource(f *os.File, src string) error {
	var err error
	if src == "" {
		if err = unix.Fremovexattr(int(f.Fd()), XattrSource); errors.Is(err, unix.ENODATA) {
			err = nil
		}
	} else {
		err = unix.Fsetxattr(int(f.Fd()), XattrSource, []byte(src), 0)
	}
	if err != nil {
		return fmt.Errorf("%s: recording the save's source in %s: %w", f.Name(), XattrSource, err)
	}
	return nil
}

func conflict(path string, sess *Session, mode string, threads int, size int64) error {
	return fmt.Errorf("%s: %w: a %s session (threads=%d, size=%d, %d bytes left) is open, this %s wants threads=%d, size=%d; "+
		"call again with the same threads and size to resume it, or abandon it (setfattr -x %s FILE)",
		path, ErrSessionConflict, sess.Mode, sess.Threads, sess.Size, sess.Remaining(), mode, threads, size, XattrSession)
}
