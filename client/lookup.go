package client

// Embedding-table lookups through a table's request file: a table T on a
// dnnfs mount (made with setxattr user.dnnfs.table) has a request file
// T.lookup; one write() is one request (indices, bag offsets, optional
// per-sample weights), one read() is one completed result, in completion
// order, matched to its request by tag. The wire format is specified in
// the "Request file wire format" section of package embedding's doc.
//
//	t, err := client.OpenTable("/mnt/emb/user.tbl")
//	pooled, err := t.Lookup(indices, offsets, client.Sum, nil) // bags x dim float32s
//
//	tag, err := t.Submit(indices, offsets, client.Mean, nil) // many in flight...
//	r, err := t.Next()                                       // ...results as they complete

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
	RequestHeaderSize = 48
	ResultHeaderSize  = 32

	requestMagic   uint32 = 0x514C4E44 // "DNLQ"
	resultMagic    uint32 = 0x524C4E44 // "DNLR"
	requestVersion uint16 = 1
	flagWeights    uint32 = 1 // per-sample weights follow (mode sum only)
)

var le = binary.LittleEndian

// Mode is what a lookup does with the rows it names.
type Mode uint8

const (
	// Gather returns the rows themselves, one per index, in the table's
	// dtype (no offsets).
	Gather Mode = 0
	// Sum pools each bag to the (optionally weighted) sum of its rows, in
	// float32, like torch.nn.EmbeddingBag(mode="sum").
	Sum Mode = 1
	// Mean pools each bag to the mean of its rows, in float32; an empty
	// bag pools to zeros.
	Mean Mode = 2
)

func (m Mode) String() string {
	switch m {
	case Gather:
		return "gather"
	case Sum:
		return "sum"
	case Mean:
		return "mean"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Dtype is the element type of a table's values.
type Dtype uint8

const (
	F32  Dtype = 1 // IEEE 754 single precision
	F16  Dtype = 2 // IEEE 754 half precision
	BF16 Dtype = 3 // bfloat16: the upper half of a float32
)

// Size returns the bytes per value, 0 for an unknown dtype.
func (d Dtype) Size() int {
	switch d {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

func (d Dtype) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	}
	return "dtype(" + strconv.Itoa(int(d)) + ")"
}

// ParseDtype reads f32, f16 or bf16 (or float32, float16, bfloat16).
func ParseDtype(s string) (Dtype, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "f32", "float32", "fp32":
		return F32, nil
	case "f16", "float16", "fp16", "half":
		return F16, nil
	case "bf16", "bfloat16":
		return BF16, nil
	}
	return 0, fmt.Errorf("dtype %q: want f32, f16 or bf16", s)
}

var (
	// ErrBadResult: a result that does not follow the wire format, or
	// does not fit its request (count, dtype, payload size).
	ErrBadResult = errors.New("malformed lookup result")
	// ErrNothingInFlight: Next was called with no Submit'ed request left
	// to return (the request file's 0-byte read).
	ErrNothingInFlight = errors.New("no lookup request in flight")
)

// invalid is a request this package refuses to send; it wraps EINVAL, the
// error the file system gives a malformed request.
func invalid(field, format string, a ...any) error {
	return fmt.Errorf("lookup request: %s: %s: %w", field, fmt.Sprintf(format, a...), syscall.EINVAL)
}

// StatusError is a request the file system failed (a non-zero result
// status): errors.Is(err, syscall.EIO) says a device failed.
type StatusError struct {
	Path  string // the request file ("" from DecodeResult users)
	Tag   uint64
	Errno syscall.Errno
}

func (e *StatusError) Error() string {
	p := ""
	if e.Path != "" {
		p = e.Path + ": "
	}
	return fmt.Sprintf("%slookup %d failed: %v", p, e.Tag, e.Errno)
}

func (e *StatusError) Unwrap() error { return e.Errno }

// EncodeLookup builds one request. indices are row numbers (>= 0; the
// file system checks them against the table's rows). offsets start the
// bags as in torch.nn.EmbeddingBag: bag j is indices[offsets[j]:
// offsets[j+1]] and the last bag runs to the end; offsets[0] = 0, they do
// not decrease and are at most len(indices). Gather takes no offsets;
// Sum and Mean need at least one offset when there are indices. weights,
// if not nil, are per-sample weights, one per index, and need Sum. dtype
// is the dtype the caller expects the table to have. Errors wrap
// syscall.EINVAL.
func EncodeLookup(tag uint64, mode Mode, dtype Dtype, indices []int64, offsets []int64, weights []float32) ([]byte, error) {
	n, b := len(indices), len(offsets)
	switch {
	case mode > Mean:
		return nil, invalid("mode", "%d, want 0 gather, 1 sum or 2 mean", mode)
	case dtype.Size() == 0:
		return nil, invalid("dtype", "%d, want 1 f32, 2 f16 or 3 bf16", dtype)
	case mode == Gather && b != 0:
		return nil, invalid("offsets", "%d offsets with mode gather (want none)", b)
	case mode != Gather && b == 0 && n > 0:
		return nil, invalid("offsets", "none with %d indices: mode %v pools bags (use offsets [0] for one bag)", n, mode)
	case weights != nil && mode != Sum:
		return nil, invalid("weights", "per-sample weights need mode sum, not %v", mode)
	case weights != nil && len(weights) != n:
		return nil, invalid("weights", "%d weights for %d indices", len(weights), n)
	}
	for i, v := range indices {
		if v < 0 {
			return nil, invalid("indices", "indices[%d] = %d is negative", i, v)
		}
	}
	for j, v := range offsets {
		switch {
		case j == 0 && v != 0:
			return nil, invalid("offsets", "offsets[0] = %d, want 0", v)
		case v > int64(n):
			return nil, invalid("offsets", "offsets[%d] = %d > %d indices", j, v, n)
		case j > 0 && v < offsets[j-1]:
			return nil, invalid("offsets", "offsets[%d] = %d < offsets[%d] = %d (must not decrease)", j, v, j-1, offsets[j-1])
		}
	}
	var flags uint32
	total := RequestHeaderSize + 8*n + 8*b
	if weights != nil {
		flags |= flagWeights
		total += 4 * n
	}
	out := make([]byte, total)
	le.PutUint32(out[0:], requestMagic)
	le.PutUint16(out[4:], requestVersion)
	out[6] = byte(mode)
	out[7] = byte(dtype)
	le.PutUint64(out[8:], tag)
	le.PutUint32(out[16:], flags)
	// out[20:24]: reserved, zero
	le.PutUint64(out[24:], uint64(n))
	le.PutUint64(out[32:], uint64(b))
	le.PutUint64(out[40:], uint64(total))
	p := out[RequestHeaderSize:]
	for i, v := range indices {
		le.PutUint64(p[8*i:], uint64(v))
	}
	p = p[8*n:]
	for j, v := range offsets {
		le.PutUint64(p[8*j:], uint64(v))
	}
	p = p[8*b:]
	for i, w := range weights {
		le.PutUint32(p[4*i:], math.Float32bits(w))
	}
	return out, nil
}

// Result is one decoded result.
type Result struct {
	Tag     uint64
	Status  syscall.Errno // 0, or why the request failed (then Payload is empty)
	Count   int           // rows (gather) or bags (sum, mean)
	Dtype   Dtype         // of Payload: the table's for gather, F32 for sum and mean
	Payload []byte        // Count rows of dim values, little-endian
}

// Err returns nil for a successful result, else a *StatusError.
func (r Result) Err() error {
	if r.Status == 0 {
		return nil
	}
	return &StatusError{Tag: r.Tag, Errno: r.Status}
}

// DecodeResult decodes one whole result (header and payload, nothing
// after). It checks the framing; a non-zero Status is not an error here
// (see Result.Err). Errors wrap ErrBadResult.
func DecodeResult(b []byte) (Result, error) {
	var r Result
	if len(b) < ResultHeaderSize {
		return r, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrBadResult, len(b), ResultHeaderSize)
	}
	if m := le.Uint32(b[0:]); m != resultMagic {
		return r, fmt.Errorf("%w: magic %#x, want %#x (\"DNLR\")", ErrBadResult, m, resultMagic)
	}
	r.Status = syscall.Errno(le.Uint32(b[4:]))
	r.Tag = le.Uint64(b[8:])
	plen := le.Uint64(b[16:])
	count := le.Uint32(b[24:])
	r.Dtype = Dtype(b[28])
	if plen != uint64(len(b)-ResultHeaderSize) {
		return r, fmt.Errorf("%w: tag %d: header says %d payload bytes, %d follow", ErrBadResult, r.Tag, plen, len(b)-ResultHeaderSize)
	}
	if uint64(count) > uint64(math.MaxInt32) {
		return r, fmt.Errorf("%w: tag %d: count %d", ErrBadResult, r.Tag, count)
	}
	r.Count = int(count)
	r.Payload = b[ResultHeaderSize:]
	if r.Status != 0 {
		if plen != 0 {
			return r, fmt.Errorf("%w: tag %d: status %d (%v) with %d payload bytes (want none)", ErrBadResult, r.Tag, uint32(r.Status), r.Status, plen)
		}
		return r, nil
	}
	es := uint64(r.Dtype.Size())
	switch {
	case es == 0:
		return r, fmt.Errorf("%w: tag %d: payload dtype %d, want 1 f32, 2 f16 or 3 bf16", ErrBadResult, r.Tag, r.Dtype)
	case plen%es != 0:
		return r, fmt.Errorf("%w: tag %d: %d payload bytes are not whole %v values", ErrBadResult, r.Tag, plen, r.Dtype)
	case r.Count == 0 && plen != 0:
		return r, fmt.Errorf("%w: tag %d: count 0 with %d payload bytes", ErrBadResult, r.Tag, plen)
	case r.Count != 0 && plen/es%uint64(r.Count) != 0:
		return r, fmt.Errorf("%w: tag %d: %d %v values do not make %d equal rows", ErrBadResult, r.Tag, plen/es, r.Dtype, r.Count)
	}
	return r, nil
}

// Float32s converts the payload to float32 values: Count rows of dim
// values each, row after row.
func (r Result) Float32s() ([]float32, error) {
	p := r.Payload
	es := r.Dtype.Size()
	if es == 0 {
		if len(p) == 0 {
			return []float32{}, nil
		}
		return nil, fmt.Errorf("%w: tag %d: payload dtype %d, want 1 f32, 2 f16 or 3 bf16", ErrBadResult, r.Tag, r.Dtype)
	}
	if len(p)%es != 0 {
		return nil, fmt.Errorf("%w: tag %d: %d payload bytes are not whole %v values", ErrBadResult, r.Tag, len(p), r.Dtype)
	}
	out := make([]float32, len(p)/es)
	switch r.Dtype {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(p[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = f16ToFloat32(le.Uint16(p[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = bf16ToFloat32(le.Uint16(p[2*i:]))
		}
	}
	return out, nil
}

// f16ToFloat32 converts an IEEE 754 half (exactly: every half is a
// float32).
func f16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0: // zero or subnormal: mant * 2^-24, exact in float32
		v := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	case 0x1f: // infinity, NaN (payload kept)
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// bf16ToFloat32 converts a bfloat16: the upper 16 bits of a float32.
func bf16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

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
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return info, fmt.Errorf("%s %q: %q is not key=value", XattrTable, v, kv)
		}
		info.Attrs[k] = val
	}
	var err error
	if info.Rows, err = strconv.ParseInt(info.Attrs["rows"], 10, 64); err != nil || info.Rows < 1 {
		return info, fmt.Errorf("%s %q: rows: want a positive integer", XattrTable, v)
	}
	dim, err := strconv.ParseInt(info.Attrs["dim"], 10, 32)
	if err != nil || dim < 1 {
		return info, fmt.Errorf("%s %q: dim: want a positive integer", XattrTable, v)
	}
	info.Dim = int(dim)
	if info.Dtype, err = ParseDtype(info.Attrs["dtype"]); err != nil {
		return info, fmt.Errorf("%s %q: %w", XattrTable, v, err)
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
			return nil, 0, fmt.Errorf("%s: %w", t.path, invalid("indices", "indices[%d] = %d out of range [0, %d)", i, v, t.info.Rows))
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
	if m := le.Uint32(b); m != resultMagic {
		return nil, fmt.Errorf("%s: %w: magic %#x, want %#x (\"DNLR\")", t.lpath, ErrBadResult, m, resultMagic)
	}
	plen := le.Uint64(b[16:])
	if plen > math.MaxInt-ResultHeaderSize {
		return nil, fmt.Errorf("%s: %w: payload of %d bytes", t.lpath, ErrBadResult, plen)
	}
	total := ResultHeaderSize + int(plen)
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
	tag := le.Uint64(raw[8:])
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
