package client

// Embedding-table lookups through a table's request file: a table T on a
// dnnfs mount (made with setxattr user.dnnfs.table) has a request file
// T.lookup; one write() is one request (indices, bag offsets, optional
// per-sample weights), one read() is one completed result, in completion
// order, matched to its request by tag. The wire format is package
// embedding/wire's (its package doc has the byte layout).
//
//	t, err := client.OpenTable("/mnt/emb/user.tbl")
//	pooled, err := t.Lookup(indices, offsets, client.Sum, nil) // bags x dim float32s
//
//	tag, err := t.Submit(indices, offsets, client.Mean, nil) // many in flight...
//	r, err := t.Next()                                       // ...results as they complete

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/embedding/wire"
	"github.com/dnnfs/dnnfs/internal/kv"
)

const (
	// XattrTable makes an empty file a table (set
	// 'rows=R,dim=D,dtype=f32|f16|bf16') and describes a table (get: the
	// same keys and more, e.g. shard_rows and shards).
	XattrTable = "user.dnnfs.table"
	// LookupSuffix names a table's request file: TABLE + LookupSuffix.
	LookupSuffix = ".lookup"

	// RequestHeaderSize and ResultHeaderSize are the fixed parts of a
	// request and a result.
	RequestHeaderSize = wire.RequestHeaderSize
	ResultHeaderSize  = wire.ResultHeaderSize
)

// The lookup modes, dtypes, results and their errors are package wire's;
// the names here keep the client's API in one place.
type (
	// Mode is what a lookup does with the rows it names.
	Mode = wire.Mode
	// Dtype is the element type of a table's values.
	Dtype = wire.Dtype
	// Result is one decoded result.
	Result = wire.Result
	// StatusError is a request the file system failed (a non-zero result
	// status): errors.Is(err, syscall.EIO) says a device failed.
	StatusError = wire.StatusError
)

const (
	Gather = wire.Gather // the rows themselves, in the table's dtype
	Sum    = wire.Sum    // each bag's (weighted) sum, in float32
	Mean   = wire.Mean   // each bag's mean, in float32

	F32  = wire.F32
	F16  = wire.F16
	BF16 = wire.BF16
)

// ParseDtype reads f32, f16 or bf16 (or float32, float16, bfloat16).
func ParseDtype(s string) (Dtype, error) { return wire.ParseDtype(s) }

// EncodeLookup builds one request. indices are row numbers (>= 0; the
// file system checks them against the table's rows). offsets start the
// bags as in torch.nn.EmbeddingBag: bag j is indices[offsets[j]:
// offsets[j+1]] and the last bag runs to the end; offsets[0] = 0, they do
// not decrease and are at most len(indices). Gather takes no offsets;
// Sum and Mean need at least one offset when there are indices. weights,
// if not nil, are per-sample weights, one per index, and need Sum. dtype
// is the dtype the caller expects the table to have. Errors are
// *wire.FieldError and wrap syscall.EINVAL.
func EncodeLookup(tag uint64, mode Mode, dtype Dtype, indices []int64, offsets []int64, weights []float32) ([]byte, error) {
	return wire.EncodeRequest(&wire.Request{Tag: tag, Mode: mode, Dtype: dtype, Indices: indices, Offsets: offsets, Weights: weights})
}

// DecodeResult decodes one whole result (header and payload, nothing
// after). It checks the framing; a non-zero Status is not an error here
// (see Result.Err). Errors wrap ErrBadResult.
func DecodeResult(b []byte) (Result, error) { return wire.DecodeResult(b) }

// TableInfo is a table's shape, from its user.dnnfs.table xattr.
type TableInfo struct {
	Rows  int64
	Dim   int
	Dtype Dtype
	Attrs map[string]string // every key=value of the xattr (shard_rows, shards, ...)
}

// ParseTableInfo reads a user.dnnfs.table value:
// 'rows=R,dim=D,dtype=f32|f16|bf16[,more=...]'.
func ParseTableInfo(v string) (TableInfo, error) {
	info := TableInfo{Attrs: map[string]string{}}
	v = strings.TrimRight(v, "\x00 \t\r\n")
	items, err := kv.Parse(v)
	if err != nil {
		return info, fmt.Errorf("%s %q: %w", XattrTable, v, err)
	}
	info.Attrs = kv.Map(items)
	for _, it := range items {
		var n int64
		switch it.Key {
		case "rows":
			info.Rows, err = it.Int(1, math.MaxInt64)
		case "dim":
			n, err = it.Int(1, math.MaxInt32)
			info.Dim = int(n)
		case "dtype":
			if info.Dtype, err = ParseDtype(it.Value); err != nil {
				err = it.Errorf("want f32, f16 or bf16")
			}
		}
		if err != nil {
			return info, fmt.Errorf("%s %q: %w", XattrTable, v, err)
		}
	}
	for _, k := range []string{"rows", "dim", "dtype"} {
		if _, ok := info.Attrs[k]; !ok {
			return info, fmt.Errorf("%s %q: no %s", XattrTable, v, k)
		}
	}
	return info, nil
}

// GetTableInfo reads the shape of the table at path.
func GetTableInfo(path string) (TableInfo, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Getxattr(path, XattrTable, buf)
		if errors.Is(err, unix.ERANGE) {
			sz, err2 := unix.Getxattr(path, XattrTable, nil)
			if err2 != nil {
				return TableInfo{}, fmt.Errorf("%s: reading %s: %w", path, XattrTable, err2)
			}
			buf = make([]byte, max(sz, 2*len(buf)))
			continue
		}
		if errors.Is(err, unix.ENODATA) {
			if _, err2 := unix.Getxattr(path, xattrLocks, nil); err2 != nil {
				return TableInfo{}, fmt.Errorf("%s: %w (reading %s: %v)", path, ErrNotDnnfs, xattrLocks, err2)
			}
			return TableInfo{}, fmt.Errorf("%s: not an embedding table (no %s; make one with setfattr -n %s -v 'rows=R,dim=D,dtype=f32' on an empty file): %w",
				path, XattrTable, XattrTable, err)
		}
		if err != nil {
			return TableInfo{}, fmt.Errorf("%s: reading %s: %w", path, XattrTable, err)
		}
		info, err := ParseTableInfo(string(buf[:n]))
		if err != nil {
			return info, fmt.Errorf("%s: %w", path, err)
		}
		return info, nil
	}
}

// CreateTable makes the file at path (created if missing; it must be
// empty) a table of rows rows of dim values of dtype.
func CreateTable(path string, rows int64, dim int, dtype Dtype) error {
	if rows < 1 || dim < 1 || dtype.Size() == 0 {
		return fmt.Errorf("%s: table rows=%d, dim=%d, dtype=%v: want positive rows and dim and f32, f16 or bf16", path, rows, dim, dtype)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	v := fmt.Sprintf("rows=%d,dim=%d,dtype=%v", rows, dim, dtype)
	if err := unix.Fsetxattr(int(f.Fd()), XattrTable, []byte(v), 0); err != nil {
		return fmt.Errorf("%s: setxattr %s=%q: %w", path, XattrTable, v, err)
	}
	return nil
}

// Table is an open embedding table: its shape and its request file. It is
// safe for concurrent use: many goroutines may Lookup at once (each waits
// for its own result), and Submit/Next keep many requests in flight.
// Results of Lookup never come out of Next and the other way round.
type Table struct {
	path  string // the table
	lpath string // its request file
	info  TableInfo
	c     reqConn
	tags  atomic.Uint64

	mu       sync.Mutex
	cond     *sync.Cond             // signalled on every result delivered and on failure
	pending  map[uint64]*pendingReq // requests not yet answered, by tag
	sizes    map[int]int            // expected result sizes of pending -> how many
	inflight int                    // pending requests whose write returned (read only while > 0)
	async    int                    // Submit'ed requests not yet returned by Next
	ready    []outcome              // answered Submit'ed requests, in completion order
	reading  bool                   // the reader goroutine runs
	answered uint64                 // results delivered so far
	writing  int                    // submits between registering and counting their request
	err      error                  // sticky: the stream is broken, or the table closed
}

type pendingReq struct {
	count   int
	dtype   Dtype
	size    int          // expected result size
	ch      chan outcome // Lookup's; nil for Submit
	written bool         // counted in inflight
}

type outcome struct {
	r   Result
	err error
}

// OpenTable opens the table at path: it reads the shape from the
// user.dnnfs.table xattr and opens the request file path+".lookup".
func OpenTable(path string) (*Table, error) {
	info, err := GetTableInfo(path)
	if err != nil {
		return nil, err
	}
	lpath := path + LookupSuffix
	// Not os.OpenFile: it would put a pollable FUSE file in non-blocking
	// mode, and a read must wait for the next completion.
	fd, err := unix.Open(lpath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: opening the request file: %w", lpath, err)
	}
	f := os.NewFile(uintptr(fd), lpath)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", lpath, err)
	}
	return newTable(path, info, &fileConn{f: f, rc: rc}), nil
}

func newTable(path string, info TableInfo, c reqConn) *Table {
	t := &Table{path: path, lpath: path + LookupSuffix, info: info, c: c,
		pending: map[uint64]*pendingReq{}, sizes: map[int]int{}}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// Path returns the table's path.
func (t *Table) Path() string { return t.path }

// Rows returns the number of rows.
func (t *Table) Rows() int64 { return t.info.Rows }

// Dim returns the number of values per row.
func (t *Table) Dim() int { return t.info.Dim }

// Dtype returns the element type of the table.
func (t *Table) Dtype() Dtype { return t.info.Dtype }

// Info returns the table's shape and every key of its xattr.
func (t *Table) Info() TableInfo { return t.info }

// Lookup runs one request and waits for its result: the rows (Gather,
// len(indices) rows, converted to float32) or the pooled bags (Sum, Mean:
// len(offsets) bags), Dim() values each, row after row. For Sum and Mean,
// nil offsets mean one bag of all indices. weights (Sum only, or nil) are
// per-sample weights. Errors: invalid requests wrap syscall.EINVAL, a
// failed request is a *StatusError wrapping its errno (syscall.EIO: a
// device failed).
func (t *Table) Lookup(indices, offsets []int64, mode Mode, weights []float32) ([]float32, error) {
	for {
		seen := t.answeredNow()
		p, _, err := t.submit(indices, offsets, mode, weights, true)
		if errors.Is(err, syscall.EAGAIN) && t.waitAnswer(seen) {
			continue // too many in flight on the handle: retry after a result
		}
		if err != nil {
			return nil, err
		}
		o := <-p.ch
		if o.err != nil {
			return nil, o.err
		}
		return o.r.Float32s()
	}
}

// Submit sends one request (see Lookup for the arguments) without waiting
// and returns its tag; Next returns its result. A write refused for too
// many requests in flight on the handle wraps syscall.EAGAIN: read
// results with Next first.
func (t *Table) Submit(indices, offsets []int64, mode Mode, weights []float32) (uint64, error) {
	_, tag, err := t.submit(indices, offsets, mode, weights, false)
	return tag, err
}

// Next waits for the next completed Submit'ed request and returns its
// result (Result.Float32s converts the payload). A failed request comes
// with its Result (Tag, Status) and a *StatusError. With nothing
// Submit'ed left to return it fails with ErrNothingInFlight.
func (t *Table) Next() (Result, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		if len(t.ready) > 0 {
			o := t.ready[0]
			t.ready[0] = outcome{}
			t.ready = t.ready[1:]
			t.async--
			return o.r, o.err
		}
		if t.err != nil {
			return Result{}, t.err
		}
		if t.async == 0 {
			return Result{}, fmt.Errorf("%s: %w", t.lpath, ErrNothingInFlight)
		}
		t.cond.Wait()
	}
}

// Close closes the request file. Lookups and Next calls still waiting
// fail with an error wrapping os.ErrClosed; results still in flight are
// dropped.
func (t *Table) Close() error {
	t.mu.Lock()
	if errors.Is(t.err, os.ErrClosed) {
		t.mu.Unlock()
		return nil
	}
	t.failLocked(fmt.Errorf("%s: %w", t.lpath, os.ErrClosed), true)
	t.mu.Unlock()
	// Wake the reader (its read returns EOF, and it stops) so that the
	// descriptor closes now, not at the next completion. A wake just
	// before the reader blocks is missed: try a few times.
	for i := 0; i < 50 && t.readerRunning(); i++ {
		t.c.wake()
		time.Sleep(time.Duration(i+1) * 100 * time.Microsecond)
	}
	return t.c.close()
}

func (t *Table) readerRunning() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reading
}

func (t *Table) submit(indices, offsets []int64, mode Mode, weights []float32, sync bool) (*pendingReq, uint64, error) {
	if offsets == nil && mode != Gather {
		offsets = []int64{0}
	}
	for i, v := range indices {
		if v >= t.info.Rows {
			return nil, 0, fmt.Errorf("%s: %w", t.path, &wire.FieldError{Field: "indices", Msg: fmt.Sprintf("indices[%d] = %d out of range [0, %d)", i, v, t.info.Rows)})
		}
	}
	tag := t.tags.Add(1)
	req, err := EncodeLookup(tag, mode, t.info.Dtype, indices, offsets, weights)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", t.path, err)
	}
	p := &pendingReq{count: len(offsets), dtype: F32}
	if mode == Gather {
		p.count, p.dtype = len(indices), t.info.Dtype
	}
	p.size = ResultHeaderSize + p.count*t.info.Dim*p.dtype.Size()
	if sync {
		p.ch = make(chan outcome, 1)
	}

	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return nil, 0, t.err
	}
	t.pending[tag] = p
	t.sizes[p.size]++
	if !sync {
		t.async++
	}
	t.writing++
	t.mu.Unlock()

	n, err := t.write(req)
	if err == nil && n != len(req) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(req))
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	t.writing--
	t.cond.Broadcast() // for waitAnswer
	if _, ok := t.pending[tag]; !ok {
		// Already answered (or failed by Close / a broken stream): it
		// was delivered, so the write did go through.
		if t.err != nil && err != nil {
			return nil, 0, t.err
		}
		return p, tag, nil
	}
	if err != nil {
		t.forgetLocked(tag, p)
		if !sync {
			t.async--
		}
		return nil, 0, fmt.Errorf("%s: writing lookup request %d (%d bytes): %w", t.lpath, tag, len(req), err)
	}
	p.written = true
	t.inflight++
	if !t.reading {
		t.reading = true
		go t.readLoop()
	}
	return p, tag, nil
}

func (t *Table) answeredNow() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.answered
}

// waitAnswer waits until a result was delivered after seen, for a write
// refused with EAGAIN; false if none can come (nothing of this Table's is
// in flight or being written, or it failed).
func (t *Table) waitAnswer(seen uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.answered == seen && (t.inflight > 0 || t.writing > 0) && t.err == nil {
		t.cond.Wait()
	}
	return t.answered != seen && t.err == nil
}

func (t *Table) forgetLocked(tag uint64, p *pendingReq) {
	delete(t.pending, tag)
	if t.sizes[p.size]--; t.sizes[p.size] == 0 {
		delete(t.sizes, p.size)
	}
	if p.written {
		t.inflight--
	}
}

// failLocked breaks the table: every waiter gets err, and so does every
// later call (Next after the results that had completed, unless closing).
func (t *Table) failLocked(err error, closing bool) {
	if t.err == nil || closing {
		t.err = err
	}
	for tag, p := range t.pending {
		t.forgetLocked(tag, p)
		if p.ch != nil {
			p.ch <- outcome{err: err}
		}
	}
	if closing {
		t.ready = nil // Next after Close fails, whatever had completed
	}
	t.async = len(t.ready)
	t.cond.Broadcast()
}

// maxEOFReads bounds the EOF reads in a row while requests are in flight
// and the Table is open (each a close() of another descriptor of the
// handle, e.g. a forked child's exit, or a file system bug).
const maxEOFReads = 100

// errEOFRead: a read returned 0 bytes, as it does when a descriptor of the
// handle is closed while it waits.
var errEOFRead = errors.New("read returned 0 bytes")

// readLoop reads results while requests are in flight and delivers them
// by tag. It runs on one locked OS thread: the rest of a result larger
// than the buffer comes on the next read by the same thread.
func (t *Table) readLoop() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	eofs := 0
	for {
		t.mu.Lock()
		if t.inflight == 0 || t.err != nil {
			t.reading = false
			t.mu.Unlock()
			return
		}
		// Read the smallest expected result whole in one call; a bigger
		// one continues with a second read of exactly its rest.
		first := math.MaxInt
		for sz := range t.sizes {
			first = min(first, sz)
		}
		t.mu.Unlock()
		raw, err := t.readResult(first)
		if err == errEOFRead {
			// Close woke us (checked at the top), or some other close()
			// of the handle did: read again, the requests are in flight.
			if eofs++; eofs <= maxEOFReads {
				if eofs > 1 {
					time.Sleep(min(time.Millisecond<<(eofs-2), 100*time.Millisecond))
				}
				continue
			}
			err = fmt.Errorf("%s: %w: %d reads in a row returned 0 bytes with requests in flight", t.lpath, ErrBadResult, eofs)
		}
		eofs = 0
		t.mu.Lock()
		if err != nil {
			t.failLocked(err, false)
		} else {
			t.deliverLocked(raw)
		}
		t.mu.Unlock()
	}
}

// readResult reads one whole result.
func (t *Table) readResult(first int) ([]byte, error) {
	b := make([]byte, max(first, ResultHeaderSize))
	n, err := t.read(b)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: reading a result: %w", t.lpath, err)
	case n == 0:
		return nil, errEOFRead
	case n < ResultHeaderSize:
		return nil, fmt.Errorf("%s: %w: read returned %d bytes, shorter than the %d-byte header", t.lpath, ErrBadResult, n, ResultHeaderSize)
	}
	total, err := wire.ResultLength(b[:n])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.lpath, err)
	}
	if n > total {
		return nil, fmt.Errorf("%s: %w: one read returned %d bytes, the result has %d", t.lpath, ErrBadResult, n, total)
	}
	if total > len(b) {
		nb := make([]byte, total)
		copy(nb, b[:n])
		b = nb
	}
	for n < total {
		k, err := t.read(b[n:total])
		if err != nil {
			return nil, fmt.Errorf("%s: reading the rest of a result (%d of %d bytes read): %w", t.lpath, n, total, err)
		}
		if k == 0 {
			return nil, fmt.Errorf("%s: %w: result cut short at %d of %d bytes", t.lpath, ErrBadResult, n, total)
		}
		n += k
	}
	return b[:total], nil
}

// deliverLocked hands a result to its Lookup or to Next. A result of a
// tag not pending (a request whose write reported an error after it went
// through) is dropped.
func (t *Table) deliverLocked(raw []byte) {
	tag := wire.ResultTag(raw)
	p, ok := t.pending[tag]
	if !ok {
		return
	}
	t.forgetLocked(tag, p)
	t.answered++
	r, err := DecodeResult(raw)
	switch {
	case err != nil:
		err = fmt.Errorf("%s: %w", t.lpath, err)
	case r.Status != 0:
		err = &StatusError{Path: t.lpath, Tag: tag, Errno: r.Status}
	case r.Count != p.count || r.Dtype != p.dtype || len(r.Payload) != p.size-ResultHeaderSize:
		err = fmt.Errorf("%s: %w: tag %d: %d %v rows in %d bytes, want %d %v rows of %d values",
			t.lpath, ErrBadResult, tag, r.Count, r.Dtype, len(r.Payload), p.count, p.dtype, t.info.Dim)
	}
	if p.ch != nil {
		p.ch <- outcome{r, err}
	} else {
		t.ready = append(t.ready, outcome{r, err})
	}
	t.cond.Broadcast()
}

// reqConn is the request file; a fake in tests.
type reqConn interface {
	read(b []byte) (int, error)  // one read() call
	write(b []byte) (int, error) // one write() call
	wake()                       // make a waiting read return 0 bytes
	close() error
}

func (t *Table) read(b []byte) (int, error)  { return t.c.read(b) }
func (t *Table) write(b []byte) (int, error) { return t.c.write(b) }

// fileConn is an open request file. Its read and write make one system
// call each (os.File.Write would send the rest of a short write as a
// second, malformed request), retried on EINTR. os.File defers the
// close(2) of a Close until a read in progress returns (Table.Close wakes
// it first), so no read lands on a reused descriptor.
type fileConn struct {
	f  *os.File
	rc syscall.RawConn
}

func (c *fileConn) close() error { return c.f.Close() }

// wake closes a duplicate of the descriptor: a close() of the file makes
// the reads waiting on it return 0 bytes.
func (c *fileConn) wake() {
	c.rc.Control(func(fd uintptr) {
		if d, err := unix.Dup(int(fd)); err == nil {
			unix.Close(d)
		}
	})
}

func (c *fileConn) read(b []byte) (n int, err error) {
	cerr := c.rc.Read(func(fd uintptr) bool {
		for {
			n, err = unix.Read(int(fd), b)
			if err != unix.EINTR {
				return true
			}
		}
	})
	if cerr != nil {
		return 0, cerr
	}
	return max(n, 0), err
}

func (c *fileConn) write(b []byte) (n int, err error) {
	cerr := c.rc.Write(func(fd uintptr) bool {
		for {
			n, err = unix.Write(int(fd), b)
			if err != unix.EINTR {
				return true
			}
		}
	})
	if cerr != nil {
		return 0, cerr
	}
	return max(n, 0), err
}
