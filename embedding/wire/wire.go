package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
)

// The constants of the format (see the package doc).
const (
	RequestMagic uint32 = 0x514C4E44 // "DNLQ"
	ResultMagic  uint32 = 0x524C4E44 // "DNLR"
	Version      uint16 = 1

	// RequestHeaderSize and ResultHeaderSize are the fixed parts of a
	// request and a result.
	RequestHeaderSize = 48
	ResultHeaderSize  = 32

	// FlagWeights: per-sample weights follow the offsets (mode sum only).
	FlagWeights uint32 = 1

	// MaxIndices bounds n and b of one request, so a header cannot make
	// the daemon allocate more than a few GiB.
	MaxIndices = 1 << 26
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

// Dtype is the element type of a table's values. The numbers are those of
// the table descriptor on the medium (format.DtypeF32 ...).
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

// ParseDtype reads f32, f16 or bf16 (or float32, fp32, float16, fp16,
// half, bfloat16; any case).
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

// FieldError is a malformed request: which field and why. It wraps
// syscall.EINVAL, the error the request file gives such a write.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("lookup request: field %s: %s", e.Field, e.Msg)
}

func (e *FieldError) Unwrap() error { return syscall.EINVAL }

func bad(field, f string, a ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(f, a...)}
}

// Request is one lookup.
type Request struct {
	Tag     uint64
	Mode    Mode
	Dtype   Dtype // the table's, as the caller expects it
	Indices []int64
	Offsets []int64
	Weights []float32 // nil without per-sample weights
}

// EncodeRequest checks the request's shape (not the indices against the
// table's rows: the daemon does) and encodes it. Errors are *FieldError.
func EncodeRequest(r *Request) ([]byte, error) {
	n, b := len(r.Indices), len(r.Offsets)
	switch {
	case r.Mode > Mean:
		return nil, bad("mode", "%d, want 0 gather, 1 sum or 2 mean", r.Mode)
	case r.Dtype.Size() == 0:
		return nil, bad("dtype", "%d, want 1 f32, 2 f16 or 3 bf16", r.Dtype)
	case r.Mode == Gather && b != 0:
		return nil, bad("offsets", "%d offsets with mode gather (want none)", b)
	case r.Mode != Gather && b == 0 && n > 0:
		return nil, bad("offsets", "none with %d indices: mode %v pools bags (use offsets [0] for one bag)", n, r.Mode)
	case r.Weights != nil && r.Mode != Sum:
		return nil, bad("weights", "per-sample weights need mode sum, not %v", r.Mode)
	case r.Weights != nil && len(r.Weights) != n:
		return nil, bad("weights", "%d weights for %d indices", len(r.Weights), n)
	case n > MaxIndices:
		return nil, bad("n", "%d indices, at most %d per request", n, MaxIndices)
	case b > MaxIndices:
		return nil, bad("b", "%d offsets, at most %d per request", b, MaxIndices)
	}
	for i, v := range r.Indices {
		if v < 0 {
			return nil, bad("indices", "indices[%d] = %d is negative", i, v)
		}
	}
	for j, v := range r.Offsets {
		switch {
		case j == 0 && v != 0:
			return nil, bad("offsets", "offsets[0] = %d, want 0", v)
		case v > int64(n):
			return nil, bad("offsets", "offsets[%d] = %d > %d indices", j, v, n)
		case j > 0 && v < r.Offsets[j-1]:
			return nil, bad("offsets", "offsets[%d] = %d < offsets[%d] = %d (must not decrease)", j, v, j-1, r.Offsets[j-1])
		}
	}
	var flags uint32
	total := RequestHeaderSize + 8*n + 8*b
	if r.Weights != nil {
		flags |= FlagWeights
		total += 4 * n
	}
	out := make([]byte, total)
	le.PutUint32(out[0:], RequestMagic)
	le.PutUint16(out[4:], Version)
	out[6] = byte(r.Mode)
	out[7] = byte(r.Dtype)
	le.PutUint64(out[8:], r.Tag)
	le.PutUint32(out[16:], flags)
	// out[20:24]: reserved, zero
	le.PutUint64(out[24:], uint64(n))
	le.PutUint64(out[32:], uint64(b))
	le.PutUint64(out[40:], uint64(total))
	p := out[RequestHeaderSize:]
	for i, v := range r.Indices {
		le.PutUint64(p[8*i:], uint64(v))
	}
	p = p[8*n:]
	for j, v := range r.Offsets {
		le.PutUint64(p[8*j:], uint64(v))
	}
	p = p[8*b:]
	for i, w := range r.Weights {
		le.PutUint32(p[4*i:], math.Float32bits(w))
	}
	return out, nil
}

// RequestLength returns the total length a header announces, or 0 if b
// is shorter than a header. The request file uses it to reassemble a
// request that the kernel delivered in several write chunks.
func RequestLength(b []byte) uint64 {
	if len(b) < RequestHeaderSize {
		return 0
	}
	return le.Uint64(b[40:])
}

// DecodeRequest decodes one whole request and checks it against a table
// of rows rows of dtype values. Errors are *FieldError naming the first
// bad field. The reserved header bytes are not checked.
func DecodeRequest(b []byte, rows uint64, dtype Dtype) (*Request, error) {
	if len(b) < RequestHeaderSize {
		return nil, bad("length", "%d bytes, shorter than the %d-byte header", len(b), RequestHeaderSize)
	}
	if m := le.Uint32(b[0:]); m != RequestMagic {
		return nil, bad("magic", "%#x, want %#x (\"DNLQ\")", m, RequestMagic)
	}
	if v := le.Uint16(b[4:]); v != Version {
		return nil, bad("version", "%d, this dnnfs speaks %d", v, Version)
	}
	r := &Request{Mode: Mode(b[6]), Dtype: Dtype(b[7]), Tag: le.Uint64(b[8:])}
	flags := le.Uint32(b[16:])
	n, nb, total := le.Uint64(b[24:]), le.Uint64(b[32:]), le.Uint64(b[40:])
	switch {
	case r.Mode > Mean:
		return nil, bad("mode", "%d, want 0 gather, 1 sum or 2 mean", r.Mode)
	case r.Dtype != dtype:
		return nil, bad("dtype", "%d, but the table holds %v (%d)", r.Dtype, dtype, dtype)
	case flags&^FlagWeights != 0:
		return nil, bad("flags", "unknown bits %#x", flags&^FlagWeights)
	case flags&FlagWeights != 0 && r.Mode != Sum:
		return nil, bad("flags", "per-sample weights need mode sum (as torch.nn.EmbeddingBag)")
	case n > MaxIndices:
		return nil, bad("n", "%d indices, at most %d per request", n, MaxIndices)
	case nb > MaxIndices:
		return nil, bad("b", "%d offsets, at most %d per request", nb, MaxIndices)
	case r.Mode == Gather && nb != 0:
		return nil, bad("b", "%d offsets with mode gather (want 0)", nb)
	}
	want := RequestHeaderSize + 8*n + 8*nb
	if flags&FlagWeights != 0 {
		want += 4 * n
	}
	if total != want {
		return nil, bad("length", "header says %d bytes, n=%d and b=%d make %d", total, n, nb, want)
	}
	if uint64(len(b)) != total {
		return nil, bad("length", "%d bytes written, header says %d (truncated buffer?)", len(b), total)
	}
	p := b[RequestHeaderSize:]
	r.Indices = make([]int64, n)
	for i := range r.Indices {
		v := int64(le.Uint64(p[8*i:]))
		if v < 0 || uint64(v) >= rows {
			return nil, bad("indices", "indices[%d] = %d out of range [0, %d)", i, v, rows)
		}
		r.Indices[i] = v
	}
	p = p[8*n:]
	r.Offsets = make([]int64, nb)
	for j := range r.Offsets {
		v := int64(le.Uint64(p[8*j:]))
		switch {
		case j == 0 && v != 0:
			return nil, bad("offsets", "offsets[0] = %d, want 0", v)
		case v < 0 || uint64(v) > n:
			return nil, bad("offsets", "offsets[%d] = %d outside [0, %d]", j, v, n)
		case j > 0 && v < r.Offsets[j-1]:
			return nil, bad("offsets", "offsets[%d] = %d < offsets[%d] = %d (must not decrease)", j, v, j-1, r.Offsets[j-1])
		}
		r.Offsets[j] = v
	}
	p = p[8*nb:]
	if flags&FlagWeights != 0 {
		r.Weights = make([]float32, n)
		for i := range r.Weights {
			r.Weights[i] = math.Float32frombits(le.Uint32(p[4*i:]))
		}
	}
	if r.Mode != Gather && nb == 0 && n > 0 {
		return nil, bad("b", "0 offsets with %d indices: pooling needs bags (offsets)", n)
	}
	return r, nil
}

// StatusError is a request the file system failed (a non-zero result
// status): errors.Is(err, syscall.EIO) says a device failed.
type StatusError struct {
	Path  string // the request file ("" when not known)
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

// Result is one result.
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

// EncodeResult builds a result message.
func EncodeResult(tag uint64, status syscall.Errno, count int, dtype Dtype, payload []byte) []byte {
	b := make([]byte, ResultHeaderSize+len(payload))
	copy(b[ResultHeaderSize:], payload)
	PutResultHeader(b, tag, status, count, dtype)
	return b
}

// PutResultHeader fills the header of b, a result whose payload is
// b[ResultHeaderSize:] already (a producer that writes the payload in
// place saves EncodeResult's copy).
func PutResultHeader(b []byte, tag uint64, status syscall.Errno, count int, dtype Dtype) {
	le.PutUint32(b[0:], ResultMagic)
	le.PutUint32(b[4:], uint32(status))
	le.PutUint64(b[8:], tag)
	le.PutUint64(b[16:], uint64(len(b)-ResultHeaderSize))
	le.PutUint32(b[24:], uint32(count))
	b[28] = byte(dtype)
	clear(b[29:ResultHeaderSize])
}

// ResultLength checks a result header (the first ResultHeaderSize bytes
// of b) and returns the total length it announces. A reader uses it to
// know how much more to read. Errors wrap ErrBadResult.
func ResultLength(b []byte) (int, error) {
	if len(b) < ResultHeaderSize {
		return 0, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrBadResult, len(b), ResultHeaderSize)
	}
	if m := le.Uint32(b[0:]); m != ResultMagic {
		return 0, fmt.Errorf("%w: magic %#x, want %#x (\"DNLR\")", ErrBadResult, m, ResultMagic)
	}
	plen := le.Uint64(b[16:])
	if plen > math.MaxInt-ResultHeaderSize {
		return 0, fmt.Errorf("%w: payload of %d bytes", ErrBadResult, plen)
	}
	return ResultHeaderSize + int(plen), nil
}

// ResultTag returns the tag of a result header (b holds at least
// ResultHeaderSize bytes).
func ResultTag(b []byte) uint64 { return le.Uint64(b[8:]) }

// DecodeResult decodes one whole result (header and payload, nothing
// after). It checks the framing; a non-zero Status is not an error here
// (see Result.Err). Errors wrap ErrBadResult. Payload aliases b.
func DecodeResult(b []byte) (Result, error) {
	var r Result
	if len(b) < ResultHeaderSize {
		return r, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrBadResult, len(b), ResultHeaderSize)
	}
	if m := le.Uint32(b[0:]); m != ResultMagic {
		return r, fmt.Errorf("%w: magic %#x, want %#x (\"DNLR\")", ErrBadResult, m, ResultMagic)
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
			out[i] = F16ToFloat32(le.Uint16(p[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = BF16ToFloat32(le.Uint16(p[2*i:]))
		}
	}
	return out, nil
}

// F16ToFloat32 converts an IEEE 754 half (exactly: every half is a
// float32).
func F16ToFloat32(h uint16) float32 {
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

// BF16ToFloat32 converts a bfloat16: the upper 16 bits of a float32.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
