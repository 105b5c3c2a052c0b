package client

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/embedding/wire"
)

var le = binary.LittleEndian

// The wire format of package embedding/wire, written out by hand. The same
// bytes are in python/test_dnnfs_wire.py.
var (
	// tag 0x0102030405060708, sum, f16, indices [3 0 7], offsets [0 2],
	// weights [1 0.5 -2].
	goldenRequest = "444e4c51" + "0100" + "01" + "02" + // magic "DNLQ", version 1, mode sum, dtype f16
		"0807060504030201" + // tag
		"01000000" + "00000000" + // flags: weights; reserved
		"0300000000000000" + "0200000000000000" + // n = 3, b = 2
		"6400000000000000" + // total = 48 + 24 + 16 + 12 = 100
		"0300000000000000" + "0000000000000000" + "0700000000000000" + // indices
		"0000000000000000" + "0200000000000000" + // offsets
		"0000803f" + "0000003f" + "000000c0" // weights 1, 0.5, -2
	// tag 0x0102030405060708, status 0, 2 rows of dim 2 in f16:
	// [1 -2] [65504 2^-24].
	goldenResult = "444e4c52" + "00000000" + // magic "DNLR", status 0
		"0807060504030201" + // tag
		"0800000000000000" + // payload bytes
		"02000000" + "02" + "000000" + // count 2, dtype f16, reserved
		"003c" + "00c0" + "ff7b" + "0100" // 1, -2, 65504, 2^-24
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodeLookupGolden(t *testing.T) {
	got, err := EncodeLookup(0x0102030405060708, Sum, F16, []int64{3, 0, 7}, []int64{0, 2}, []float32{1, 0.5, -2})
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, goldenRequest); !bytes.Equal(got, want) {
		t.Fatalf("request\n got %x\nwant %x", got, want)
	}
}

func TestEncodeLookupShapes(t *testing.T) {
	for _, c := range []struct {
		name    string
		mode    Mode
		idx     []int64
		off     []int64
		w       []float32
		total   int
		flags   uint32
		n, bags uint64
	}{
		{"gather", Gather, []int64{1, 2, 3}, nil, nil, 48 + 24, 0, 3, 0},
		{"gather empty", Gather, nil, nil, nil, 48, 0, 0, 0},
		{"sum", Sum, []int64{1, 2, 3}, []int64{0, 1, 1}, nil, 48 + 24 + 24, 0, 3, 3},
		{"sum weighted", Sum, []int64{1, 2}, []int64{0}, []float32{2, 3}, 48 + 16 + 8 + 8, 1, 2, 1},
		{"mean", Mean, []int64{9}, []int64{0, 1}, nil, 48 + 8 + 16, 0, 1, 2},
		{"mean no indices", Mean, nil, []int64{0, 0}, nil, 48 + 16, 0, 0, 2},
		{"sum nothing", Sum, nil, nil, nil, 48, 0, 0, 0},
	} {
		b, err := EncodeLookup(77, c.mode, BF16, c.idx, c.off, c.w)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(b) != c.total || le.Uint64(b[40:]) != uint64(c.total) || le.Uint32(b[16:]) != c.flags ||
			le.Uint64(b[24:]) != c.n || le.Uint64(b[32:]) != c.bags || b[6] != byte(c.mode) || b[7] != 3 ||
			le.Uint64(b[8:]) != 77 || le.Uint32(b[20:]) != 0 {
			t.Errorf("%s: %x", c.name, b)
			continue
		}
		// Decode it back the way the file system does.
		p := b[48:]
		for i, v := range c.idx {
			if int64(le.Uint64(p[8*i:])) != v {
				t.Errorf("%s: index %d", c.name, i)
			}
		}
		p = p[8*len(c.idx):]
		for j, v := range c.off {
			if int64(le.Uint64(p[8*j:])) != v {
				t.Errorf("%s: offset %d", c.name, j)
			}
		}
		p = p[8*len(c.off):]
		for i, v := range c.w {
			if math.Float32frombits(le.Uint32(p[4*i:])) != v {
				t.Errorf("%s: weight %d", c.name, i)
			}
		}
	}
}

func TestEncodeLookupInvalid(t *testing.T) {
	for _, c := range []struct {
		name  string
		mode  Mode
		dtype Dtype
		idx   []int64
		off   []int64
		w     []float32
		field string
	}{
		{"weights with mean", Mean, F32, []int64{1}, []int64{0}, []float32{1}, "weights"},
		{"weights with gather", Gather, F32, []int64{1}, nil, []float32{1}, "weights"},
		{"empty weights with gather", Gather, F32, nil, nil, []float32{}, "weights"},
		{"weights count", Sum, F32, []int64{1, 2}, []int64{0}, []float32{1}, "weights"},
		{"offsets[0] != 0", Sum, F32, []int64{1, 2}, []int64{1}, nil, "offsets"},
		{"offsets decrease", Sum, F32, []int64{1, 2, 3}, []int64{0, 2, 1}, nil, "offsets"},
		{"offset past n", Mean, F32, []int64{1, 2}, []int64{0, 3}, nil, "offsets"},
		{"offsets with gather", Gather, F32, []int64{1}, []int64{0}, nil, "offsets"},
		{"pooling without offsets", Sum, F32, []int64{1}, nil, nil, "offsets"},
		{"negative index", Gather, F32, []int64{0, -1}, nil, nil, "indices"},
		{"bad mode", Mode(3), F32, nil, nil, nil, "mode"},
		{"bad dtype", Gather, Dtype(0), nil, nil, nil, "dtype"},
		{"bad dtype 4", Gather, Dtype(4), nil, nil, nil, "dtype"},
	} {
		b, err := EncodeLookup(1, c.mode, c.dtype, c.idx, c.off, c.w)
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: got %x, %v; want EINVAL naming %s", c.name, b, err, c.field)
		}
	}
	// Equal offsets (empty bags) and offsets equal to n are fine.
	if _, err := EncodeLookup(1, Sum, F32, []int64{4, 5}, []int64{0, 0, 2, 2}, nil); err != nil {
		t.Errorf("empty bags: %v", err)
	}
}

func TestDecodeResultGolden(t *testing.T) {
	r, err := DecodeResult(unhex(t, goldenResult))
	if err != nil {
		t.Fatal(err)
	}
	if r.Tag != 0x0102030405060708 || r.Status != 0 || r.Count != 2 || r.Dtype != F16 || len(r.Payload) != 8 || r.Err() != nil {
		t.Fatalf("%+v", r)
	}
	v, err := r.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{1, -2, 65504, 0x1p-24}; fmt.Sprint(v) != fmt.Sprint(want) {
		t.Fatalf("values %v, want %v", v, want)
	}
}

// result builds a result message.
func result(tag uint64, status uint32, count int, dtype Dtype, payload []byte) []byte {
	b := make([]byte, ResultHeaderSize+len(payload))
	le.PutUint32(b[0:], wire.ResultMagic)
	le.PutUint32(b[4:], status)
	le.PutUint64(b[8:], tag)
	le.PutUint64(b[16:], uint64(len(payload)))
	le.PutUint32(b[24:], uint32(count))
	b[28] = byte(dtype)
	copy(b[ResultHeaderSize:], payload)
	return b
}

func TestDecodeResult(t *testing.T) {
	f32 := make([]byte, 12)
	for i, v := range []float32{1.5, -0.25, 3e38} {
		le.PutUint32(f32[4*i:], math.Float32bits(v))
	}
	r, err := DecodeResult(result(9, 0, 3, F32, f32))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := r.Float32s(); err != nil || fmt.Sprint(v) != fmt.Sprint([]float32{1.5, -0.25, 3e38}) {
		t.Fatalf("f32 payload: %v, %v", v, err)
	}
	bf := []byte{0x80, 0x3f, 0x00, 0xc0, 0x49, 0x40, 0x80, 0xff}
	r, err = DecodeResult(result(10, 0, 1, BF16, bf))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := r.Float32s(); err != nil || fmt.Sprint(v) != fmt.Sprint([]float32{1, -2, 3.140625, float32(math.Inf(-1))}) {
		t.Fatalf("bf16 payload: %v, %v", v, err)
	}
	// A failed request: the errno, an empty payload, dtype 0 allowed.
	r, err = DecodeResult(result(11, uint32(syscall.EIO), 0, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	var se *StatusError
	if e := r.Err(); !errors.Is(e, syscall.EIO) || !errors.As(e, &se) || se.Tag != 11 {
		t.Fatalf("status EIO: Err() = %v", e)
	}
	if v, err := r.Float32s(); err != nil || len(v) != 0 {
		t.Fatalf("failed result's values: %v, %v", v, err)
	}
	// Gather of no rows.
	if r, err := DecodeResult(result(12, 0, 0, F16, nil)); err != nil || r.Count != 0 {
		t.Fatalf("empty gather: %+v, %v", r, err)
	}

	good := result(1, 0, 2, F32, make([]byte, 16))
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"short header", good[:31]},
		{"bad magic", append([]byte{'D', 'N', 'L', 'Q'}, good[4:]...)},
		{"payload cut", good[:len(good)-1]},
		{"bytes after", append(append([]byte(nil), good...), 0)},
		{"dtype 0", result(1, 0, 2, 0, make([]byte, 16))},
		{"dtype 4", result(1, 0, 2, 4, make([]byte, 16))},
		{"half a value", result(1, 0, 1, F32, make([]byte, 6))},
		{"rows unequal", result(1, 0, 3, F32, make([]byte, 16))},
		{"count 0 with payload", result(1, 0, 0, F32, make([]byte, 4))},
		{"error with payload", result(1, uint32(syscall.EIO), 1, F32, make([]byte, 4))},
	} {
		if r, err := DecodeResult(c.b); !errors.Is(err, ErrBadResult) {
			t.Errorf("%s: got %+v, %v; want ErrBadResult", c.name, r, err)
		}
	}
}

// f16Ref converts a half the slow, obvious way.
func f16Ref(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10)&0x1f, float64(h&0x3ff)
	switch e {
	case 0:
		return sign * math.Ldexp(m, -24)
	case 31:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1+m/1024, e-15)
}

func TestParseTableInfo(t *testing.T) {
	info, err := ParseTableInfo("rows=1000,dim=64,dtype=bf16,shard_rows=256,shards=4\n")
	if err != nil {
		t.Fatal(err)
	}
	if info.Rows != 1000 || info.Dim != 64 || info.Dtype != BF16 || info.Attrs["shards"] != "4" {
		t.Fatalf("%+v", info)
	}
	for _, bad := range []string{"", "rows=10,dim=4", "rows=0,dim=4,dtype=f32", "rows=10,dim=x,dtype=f32", "rows=10,dim=4,dtype=f64", "rows=10;dim=4"} {
		if _, err := ParseTableInfo(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// ---------------------------------------------------------------------
// A fake request file: the behaviour package embedding/wire specifies, with
// requests completing in random order after random delays.

type fakeFile struct {
	t           *testing.T
	info        TableInfo
	data        []byte // the table, rows x dim values of info.Dtype
	maxInFlight int
	fail        func(idx []int64) bool             // complete with EIO
	mangle      func(res []byte, mode Mode) []byte // corrupt a result
	hold        chan struct{}                      // completions wait for it to close (nil: don't)
	writes      int                                // successful writes
	mu          sync.Mutex
	cond        *sync.Cond
	inflight    int
	results     [][]byte
	drain       map[int][]byte // thread -> rest of its partly read result
	continued   int            // reads that continued a result
	flushes     int            // close() calls of descriptors of the handle
	eofs        int            // reads that returned 0 bytes
	closed      bool
}

func newFake(t *testing.T, rows int64, dim int, dtype Dtype, seed uint64) *fakeFile {
	f := &fakeFile{t: t, info: TableInfo{Rows: rows, Dim: dim, Dtype: dtype}, maxInFlight: 4096, drain: map[int][]byte{}}
	f.cond = sync.NewCond(&f.mu)
	rng := rand.New(rand.NewPCG(seed, 1))
	f.data = make([]byte, int(rows)*dim*dtype.Size())
	for i := 0; i < int(rows)*dim; i++ {
		v := float32(rng.NormFloat64())
		switch dtype {
		case F32:
			le.PutUint32(f.data[4*i:], math.Float32bits(v))
		case F16:
			// Any half in (-4, 4): sign, exponent 0..16, random mantissa.
			h := uint16(rng.IntN(17))<<10 | uint16(rng.IntN(1024))
			if v < 0 {
				h |= 0x8000
			}
			le.PutUint16(f.data[2*i:], h)
		case BF16:
			le.PutUint16(f.data[2*i:], uint16(math.Float32bits(v)>>16))
		}
	}
	return f
}

// value is table value (row, col) by the slow reference conversions.
func (f *fakeFile) value(row int64, col int) float64 {
	i := int(row)*f.info.Dim + col
	switch f.info.Dtype {
	case F32:
		return float64(math.Float32frombits(le.Uint32(f.data[4*i:])))
	case F16:
		return f16Ref(le.Uint16(f.data[2*i:]))
	}
	return float64(math.Float32frombits(uint32(le.Uint16(f.data[2*i:])) << 16))
}

type fakeReq struct {
	tag      uint64
	mode     Mode
	idx, off []int64
	w        []float32
}

// parse decodes a request by the spec, independently of EncodeLookup.
func (f *fakeFile) parse(b []byte) (*fakeReq, error) {
	if len(b) < 48 || le.Uint32(b) != 0x514C4E44 || le.Uint16(b[4:]) != 1 || b[6] > 2 || Dtype(b[7]) != f.info.Dtype ||
		le.Uint32(b[16:])&^1 != 0 || le.Uint32(b[20:]) != 0 {
		return nil, fmt.Errorf("bad header %x", b[:min(len(b), 48)])
	}
	r := &fakeReq{tag: le.Uint64(b[8:]), mode: Mode(b[6])}
	n, nb := int(le.Uint64(b[24:])), int(le.Uint64(b[32:]))
	weighted := le.Uint32(b[16:])&1 != 0
	want := 48 + 8*n + 8*nb
	if weighted {
		want += 4 * n
	}
	if int(le.Uint64(b[40:])) != want || len(b) != want || (weighted && r.mode != Sum) || (r.mode == Gather && nb != 0) ||
		(r.mode != Gather && nb == 0 && n > 0) {
		return nil, fmt.Errorf("bad lengths or flags")
	}
	for i := 0; i < n; i++ {
		v := int64(le.Uint64(b[48+8*i:]))
		if v < 0 || v >= f.info.Rows {
			return nil, fmt.Errorf("index %d out of range", v)
		}
		r.idx = append(r.idx, v)
	}
	for j := 0; j < nb; j++ {
		v := int64(le.Uint64(b[48+8*n+8*j:]))
		if (j == 0 && v != 0) || v > int64(n) || (j > 0 && v < r.off[j-1]) {
			return nil, fmt.Errorf("bad offsets")
		}
		r.off = append(r.off, v)
	}
	if weighted {
		for i := 0; i < n; i++ {
			r.w = append(r.w, math.Float32frombits(le.Uint32(b[48+8*n+8*nb+4*i:])))
		}
	}
	return r, nil
}

func (f *fakeFile) compute(r *fakeReq) []byte {
	if f.fail != nil && f.fail(r.idx) {
		return result(r.tag, uint32(syscall.EIO), 0, 0, nil)
	}
	dim, rb := f.info.Dim, f.info.Dim*f.info.Dtype.Size()
	if r.mode == Gather {
		var p []byte
		for _, i := range r.idx {
			p = append(p, f.data[int(i)*rb:int(i+1)*rb]...)
		}
		return result(r.tag, 0, len(r.idx), f.info.Dtype, p)
	}
	p := make([]byte, 4*dim*len(r.off))
	for j := range r.off {
		a, b := r.off[j], int64(len(r.idx))
		if j+1 < len(r.off) {
			b = r.off[j+1]
		}
		for c := 0; c < dim; c++ {
			var acc float32
			for k := a; k < b; k++ {
				w := float32(1)
				if r.w != nil {
					w = r.w[k]
				}
				acc += w * float32(f.value(r.idx[k], c))
			}
			if r.mode == Mean && b > a {
				acc /= float32(b - a)
			}
			le.PutUint32(p[4*(j*dim+c):], math.Float32bits(acc))
		}
	}
	return result(r.tag, 0, len(r.off), F32, p)
}

func (f *fakeFile) write(b []byte) (int, error) {
	r, err := f.parse(b)
	if err != nil {
		return 0, syscall.EINVAL
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, syscall.EBADF
	}
	if f.inflight >= f.maxInFlight {
		return 0, syscall.EAGAIN
	}
	f.inflight++
	f.writes++
	delay := time.Duration(rand.IntN(300)) * time.Microsecond
	go func() {
		if f.hold != nil {
			<-f.hold
		}
		time.Sleep(delay)
		res := f.compute(r)
		if f.mangle != nil {
			res = f.mangle(res, r.mode)
		}
		f.mu.Lock()
		f.results = append(f.results, res)
		f.inflight--
		f.cond.Broadcast()
		f.mu.Unlock()
	}()
	return len(b), nil
}

func (f *fakeFile) read(b []byte) (int, error) {
	tid := unix.Gettid()
	f.mu.Lock()
	defer f.mu.Unlock()
	res, ok := f.drain[tid]
	if ok {
		delete(f.drain, tid)
		f.continued++
	} else {
		// Wait like a pipe; EOF if the file is closed meanwhile.
		flushes := f.flushes
		for len(f.results) == 0 {
			if f.closed {
				return 0, syscall.EBADF
			}
			if f.flushes != flushes {
				f.eofs++
				return 0, nil
			}
			f.cond.Wait()
		}
		res = f.results[0]
		f.results = f.results[1:]
	}
	k := copy(b, res)
	if k < len(res) {
		f.drain[tid] = res[k:]
	}
	return k, nil
}

func (f *fakeFile) wake() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushes++
	f.cond.Broadcast()
}

func (f *fakeFile) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.cond.Broadcast()
	return nil
}

func (f *fakeFile) table() *Table { return newTable("/fake/t", f.info, f) }

// expect computes what a lookup must return.
func (f *fakeFile) expect(idx, off []int64, mode Mode, w []float32) []float64 {
	dim := f.info.Dim
	if mode == Gather {
		out := make([]float64, 0, len(idx)*dim)
		for _, i := range idx {
			for c := 0; c < dim; c++ {
				out = append(out, f.value(i, c))
			}
		}
		return out
	}
	if off == nil {
		off = []int64{0}
	}
	out := make([]float64, len(off)*dim)
	for j := range off {
		a, b := off[j], int64(len(idx))
		if j+1 < len(off) {
			b = off[j+1]
		}
		for k := a; k < b; k++ {
			for c := 0; c < dim; c++ {
				wt := 1.0
				if w != nil {
					wt = float64(w[k])
				}
				out[j*dim+c] += wt * f.value(idx[k], c)
			}
		}
		if mode == Mean && b > a {
			for c := 0; c < dim; c++ {
				out[j*dim+c] /= float64(b - a)
			}
		}
	}
	return out
}

func closeTo(got []float32, want []float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
			return fmt.Errorf("value %d = %g, want %g", i, got[i], want[i])
		}
	}
	return nil
}

// randomRequest makes a request: random mode, bags (some empty), weights.
func randomRequest(rng *rand.Rand, rows int64) (idx, off []int64, mode Mode, w []float32) {
	mode = Mode(rng.IntN(3))
	n := rng.IntN(24)
	for range n {
		idx = append(idx, rng.Int64N(rows))
	}
	if mode == Gather {
		return
	}
	if rng.IntN(5) > 0 { // else nil: one bag
		off = []int64{0}
		for range rng.IntN(6) {
			off = append(off, off[len(off)-1]+rng.Int64N(int64(n)-off[len(off)-1]+1))
		}
	}
	if mode == Sum && rng.IntN(2) == 0 {
		for range n {
			w = append(w, float32(rng.NormFloat64()))
		}
	}
	return
}

// TestTableConcurrent: many goroutines Lookup on one Table while others
// keep batches in flight with Submit/Next, against a fake request file
// that completes in random order, refuses writes beyond 8 in flight
// (EAGAIN) and fails some requests with EIO.
func TestTableConcurrent(t *testing.T) {
	for _, dt := range []Dtype{F32, F16, BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			const rows = 500
			f := newFake(t, rows, 7, dt, uint64(dt))
			f.maxInFlight = 8
			f.fail = func(idx []int64) bool { return len(idx) > 0 && idx[0] == rows-1 }
			tb := f.table()
			if tb.Rows() != rows || tb.Dim() != 7 || tb.Dtype() != dt {
				t.Fatalf("shape %d %d %v", tb.Rows(), tb.Dim(), tb.Dtype())
			}
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 2))
					for k := range 60 {
						idx, off, mode, w := randomRequest(rng, rows)
						if k%10 == 9 && len(idx) > 0 {
							idx[0] = rows - 1 // fails
						}
						got, err := tb.Lookup(idx, off, mode, w)
						if len(idx) > 0 && idx[0] == rows-1 {
							var se *StatusError
							if !errors.Is(err, syscall.EIO) || !errors.As(err, &se) {
								t.Errorf("failing lookup: %v, want EIO", err)
							}
							continue
						}
						if err != nil {
							t.Errorf("lookup %v %v %v: %v", mode, idx, off, err)
							return
						}
						if err := closeTo(got, f.expect(idx, off, mode, w)); err != nil {
							t.Errorf("lookup %v idx %v off %v w %v: %v", mode, idx, off, w, err)
						}
					}
				}()
			}
			// One goroutine keeps batches of 6 in flight with Submit/Next.
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(99, 3))
				type req struct {
					idx, off []int64
					mode     Mode
					w        []float32
				}
				for range 20 {
					sent := map[uint64]req{}
					for len(sent) < 6 {
						idx, off, mode, w := randomRequest(rng, rows-1)
						tag, err := tb.Submit(idx, off, mode, w)
						if errors.Is(err, syscall.EAGAIN) {
							if len(sent) == 0 {
								time.Sleep(100 * time.Microsecond)
								continue
							}
							break // read some first
						}
						if err != nil {
							t.Errorf("submit: %v", err)
							return
						}
						sent[tag] = req{idx, off, mode, w}
					}
					for range len(sent) {
						r, err := tb.Next()
						if err != nil {
							t.Errorf("next: %v", err)
							return
						}
						q, ok := sent[r.Tag]
						if !ok {
							t.Errorf("next: tag %d not submitted by this batch", r.Tag)
							return
						}
						delete(sent, r.Tag)
						v, err := r.Float32s()
						if err == nil {
							err = closeTo(v, f.expect(q.idx, q.off, q.mode, q.w))
						}
						if err != nil {
							t.Errorf("submitted %v %v %v: %v", q.mode, q.idx, q.off, err)
						}
					}
				}
				if _, err := tb.Next(); !errors.Is(err, ErrNothingInFlight) {
					t.Errorf("next with nothing submitted: %v, want ErrNothingInFlight", err)
				}
			}()
			wg.Wait()
			if err := tb.Close(); err != nil {
				t.Error(err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.drain) != 0 {
				t.Errorf("results left partly read: a continuation read came from another thread? %d", len(f.drain))
			}
			if f.continued == 0 {
				t.Errorf("no result was read in two parts: the continuation path was not exercised")
			}
			t.Logf("%d requests, %d continued reads", f.writes, f.continued)
		})
	}
}

func TestTableInvalid(t *testing.T) {
	f := newFake(t, 10, 3, F32, 1)
	tb := f.table()
	defer tb.Close()
	for _, c := range []struct {
		name string
		idx  []int64
		off  []int64
		mode Mode
		w    []float32
	}{
		{"index = rows", []int64{10}, nil, Gather, nil},
		{"negative index", []int64{-1}, []int64{0}, Sum, nil},
		{"weights with mean", []int64{1}, nil, Mean, []float32{1}},
		{"offsets[0] != 0", []int64{1, 2}, []int64{1}, Sum, nil},
		{"offsets with gather", []int64{1}, []int64{0}, Gather, nil},
	} {
		if _, err := tb.Lookup(c.idx, c.off, c.mode, c.w); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: %v, want EINVAL", c.name, err)
		}
	}
	if f.writes != 0 {
		t.Errorf("%d invalid requests were written", f.writes)
	}
	// The file system refuses what this package cannot check: a dtype
	// mismatch (the table changed under an open Table, say).
	tb.info.Dtype = F16
	if _, err := tb.Lookup([]int64{1}, nil, Gather, nil); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "writing") {
		t.Errorf("request the fake refused: %v, want EINVAL from the write", err)
	}
	tb.info.Dtype = F32
	// The Table still works.
	got, err := tb.Lookup([]int64{2, 2}, nil, Mean, nil)
	if err == nil {
		err = closeTo(got, f.expect([]int64{2}, nil, Gather, nil))
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Next(); !errors.Is(err, ErrNothingInFlight) {
		t.Errorf("Next with nothing submitted: %v", err)
	}
}

func TestTableBadResult(t *testing.T) {
	f := newFake(t, 10, 3, F16, 1)
	f.mangle = func(res []byte, mode Mode) []byte {
		if mode == Mean {
			le.PutUint32(res[24:], le.Uint32(res[24:])+1) // one bag too many
		}
		return res
	}
	tb := f.table()
	defer tb.Close()
	if _, err := tb.Lookup([]int64{1, 2}, []int64{0, 1}, Mean, nil); !errors.Is(err, ErrBadResult) {
		t.Errorf("wrong count: %v, want ErrBadResult", err)
	}
	// The stream stays in step: the next lookup works.
	if got, err := tb.Lookup([]int64{4}, nil, Gather, nil); err != nil || closeTo(got, f.expect([]int64{4}, nil, Gather, nil)) != nil {
		t.Errorf("lookup after a bad result: %v, %v", got, err)
	}

	// A broken frame breaks the Table for good.
	f.mangle = func(res []byte, mode Mode) []byte { res[0] = 'X'; return res }
	if _, err := tb.Lookup([]int64{1}, nil, Gather, nil); !errors.Is(err, ErrBadResult) {
		t.Errorf("bad magic: %v, want ErrBadResult", err)
	}
	if _, err := tb.Lookup([]int64{1}, nil, Gather, nil); !errors.Is(err, ErrBadResult) {
		t.Errorf("after bad magic: %v, want the sticky ErrBadResult", err)
	}
}

func TestTableClose(t *testing.T) {
	f := newFake(t, 10, 3, F32, 1)
	f.hold = make(chan struct{})
	tb := f.table()
	errs := make(chan error, 4)
	for range 3 {
		go func() {
			_, err := tb.Lookup([]int64{1}, nil, Sum, nil)
			errs <- err
		}()
	}
	if _, err := tb.Submit([]int64{1}, nil, Gather, nil); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := tb.Next()
		errs <- err
	}()
	for {
		f.mu.Lock()
		n := f.writes
		f.mu.Unlock()
		if n == 4 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Completions stay held: Close wakes the reader (EOF) rather than
	// waiting for one.
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if tb.readerRunning() {
		t.Error("the reader still runs after Close")
	}
	for range 4 {
		select {
		case err := <-errs:
			if !errors.Is(err, os.ErrClosed) {
				t.Errorf("waiting call: %v, want os.ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiting call did not return after Close")
		}
	}
	if _, err := tb.Lookup([]int64{1}, nil, Sum, nil); !errors.Is(err, os.ErrClosed) {
		t.Errorf("lookup after Close: %v", err)
	}
	if _, err := tb.Next(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Next after Close: %v", err)
	}
	if err := tb.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	close(f.hold)
}

// TestTableSpuriousEOF: a close() of another descriptor of the handle (a
// forked child exiting, say) makes a waiting read return 0 bytes; the
// Table reads again and the lookups complete.
func TestTableSpuriousEOF(t *testing.T) {
	f := newFake(t, 10, 3, BF16, 1)
	f.hold = make(chan struct{})
	tb := f.table()
	defer tb.Close()
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			idx := []int64{int64(i), 9}
			got, err := tb.Lookup(idx, nil, Mean, nil)
			if err == nil {
				want := f.expect(idx, nil, Mean, nil)
				err = closeTo(got, want)
			}
			errs <- err
		}()
	}
	for {
		f.mu.Lock()
		n := f.writes
		f.mu.Unlock()
		if n == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for range 3 {
		time.Sleep(2 * time.Millisecond)
		f.wake()
	}
	close(f.hold)
	for range 3 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.eofs == 0 {
		t.Error("no read returned EOF: the test did not test")
	}
}

// TestTableCloseDropsReady: results that completed before Close are not
// returned after it.
func TestTableCloseDropsReady(t *testing.T) {
	f := newFake(t, 10, 3, F32, 1)
	tb := f.table()
	if _, err := tb.Submit([]int64{1}, nil, Gather, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		tb.mu.Lock()
		n := len(tb.ready)
		tb.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the result did not arrive")
		}
	}
	tb.Close()
	if r, err := tb.Next(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Next after Close: %+v, %v; want os.ErrClosed", r, err)
	}
}
