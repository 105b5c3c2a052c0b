package embedding

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"syscall"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/format"
)

// Wire constants of the request file (see the package doc).
const (
	ReqMagic     uint32 = 0x514C4E44 // "DNLQ"
	ResMagic     uint32 = 0x524C4E44 // "DNLR"
	ReqVersion          = 1
	ReqHeader           = 48
	ResHeader           = 32
	FlagWeights  uint32 = 1
	ModeGather   uint8  = 0
	ModeSum      uint8  = 1
	ModeMean     uint8  = 2
	MaxReqIndex         = 1 << 26 // indices per request
	maxReqLength        = ReqHeader + 20*MaxReqIndex
)

var le = binary.LittleEndian

// FieldError is a malformed request: which field and why.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("lookup request: field %s: %s", e.Field, e.Msg)
}

// ErrInvalid: a malformed lookup request (FieldErrors match it) or a bad
// migration request.
var ErrInvalid = errors.New("invalid request")

func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// ErrPastEnd: a write at or past a table's end (its size is fixed).
var ErrPastEnd = errors.New("write past the end of the table (its size is fixed by rows x dim)")

// LookupRequest is a decoded request.
type LookupRequest struct {
	Tag     uint64
	Mode    uint8
	Dtype   uint8
	Indices []int64
	Offsets []int64
	Weights []float32 // nil without per-sample weights
}

// RequestLength returns the total length a header announces, or 0 if b is
// shorter than a header. The request file uses it to reassemble a request
// that the kernel delivered in several write chunks.
func RequestLength(b []byte) uint64 {
	if len(b) < ReqHeader {
		return 0
	}
	return le.Uint64(b[40:])
}

// ParseLookup decodes and validates a request against a table.
func ParseLookup(b []byte, h format.TableHeader) (*LookupRequest, error) {
	bad := func(field, f string, a ...any) error { return &FieldError{Field: field, Msg: fmt.Sprintf(f, a...)} }
	if len(b) < ReqHeader {
		return nil, bad("length", "%d bytes, shorter than the %d-byte header", len(b), ReqHeader)
	}
	if m := le.Uint32(b[0:]); m != ReqMagic {
		return nil, bad("magic", "%#x, want %#x (\"DNLQ\")", m, ReqMagic)
	}
	if v := le.Uint16(b[4:]); v != ReqVersion {
		return nil, bad("version", "%d, this dnnfs speaks %d", v, ReqVersion)
	}
	r := &LookupRequest{Mode: b[6], Dtype: b[7], Tag: le.Uint64(b[8:])}
	flags := le.Uint32(b[16:])
	n, nb, total := le.Uint64(b[24:]), le.Uint64(b[32:]), le.Uint64(b[40:])
	switch {
	case r.Mode > ModeMean:
		return nil, bad("mode", "%d, want 0 gather, 1 sum or 2 mean", r.Mode)
	case r.Dtype != h.Dtype:
		return nil, bad("dtype", "%d, but the table holds %s (%d)", r.Dtype, DtypeName(h.Dtype), h.Dtype)
	case flags&^FlagWeights != 0:
		return nil, bad("flags", "unknown bits %#x", flags&^FlagWeights)
	case flags&FlagWeights != 0 && r.Mode != ModeSum:
		return nil, bad("flags", "per-sample weights need mode sum (as torch.nn.EmbeddingBag)")
	case n > MaxReqIndex:
		return nil, bad("n", "%d indices, at most %d per request", n, MaxReqIndex)
	case nb > MaxReqIndex:
		return nil, bad("b", "%d offsets, at most %d per request", nb, MaxReqIndex)
	case r.Mode == ModeGather && nb != 0:
		return nil, bad("b", "%d offsets with mode gather (want 0)", nb)
	}
	want := ReqHeader + 8*n + 8*nb
	if flags&FlagWeights != 0 {
		want += 4 * n
	}
	if total != want {
		return nil, bad("length", "header says %d bytes, n=%d and b=%d make %d", total, n, nb, want)
	}
	if uint64(len(b)) != total {
		return nil, bad("length", "%d bytes written, header says %d (truncated buffer?)", len(b), total)
	}
	p := b[ReqHeader:]
	r.Indices = make([]int64, n)
	for i := range r.Indices {
		v := int64(le.Uint64(p[8*i:]))
		if v < 0 || uint64(v) >= h.Rows {
			return nil, bad("indices", "indices[%d] = %d out of range [0, %d)", i, v, h.Rows)
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
	if (r.Mode == ModeSum || r.Mode == ModeMean) && nb == 0 && n > 0 {
		return nil, bad("b", "0 offsets with %d indices: pooling needs bags (offsets)", n)
	}
	return r, nil
}

// DtypeName names an element type.
func DtypeName(dt uint8) string {
	switch dt {
	case format.DtypeF32:
		return "f32"
	case format.DtypeF16:
		return "f16"
	case format.DtypeBF16:
		return "bf16"
	}
	return fmt.Sprintf("dtype(%d)", dt)
}

// ParseDtype reads f32, f16 or bf16.
func ParseDtype(s string) (uint8, error) {
	switch s {
	case "f32", "float32", "fp32":
		return format.DtypeF32, nil
	case "f16", "float16", "fp16", "half":
		return format.DtypeF16, nil
	case "bf16", "bfloat16":
		return format.DtypeBF16, nil
	}
	return 0, fmt.Errorf("dtype %q: want f32, f16 or bf16", s)
}

// EncodeResult builds a result message.
func EncodeResult(tag uint64, status syscall.Errno, count int, dtype uint8, payload []byte) []byte {
	b := make([]byte, ResHeader+len(payload))
	le.PutUint32(b[0:], ResMagic)
	le.PutUint32(b[4:], uint32(status))
	le.PutUint64(b[8:], tag)
	le.PutUint64(b[16:], uint64(len(payload)))
	le.PutUint32(b[24:], uint32(count))
	b[28] = dtype
	copy(b[ResHeader:], payload)
	return b
}

// Lookup runs a request asynchronously: the rows it names are read once
// each (deduplicated, sector-aligned runs per shard copy) through the
// scheduler, then gathered or pooled; done receives the encoded result.
func (t *Table) Lookup(r *LookupRequest, done func(result []byte)) {
	rb := int(t.rowBytes)
	uniq := slices.Clone(r.Indices)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	rowData := make([]byte, len(uniq)*rb)
	var pieces []*piece
	var pins []*location
	maxPiece := int64(t.tier.sched.cfg.MaxPiece)
	for i := 0; i < len(uniq); {
		s := int(uint64(uniq[i]) / t.hdr.ShardRows)
		first := int64(uint64(s) * t.hdr.ShardRows)
		j := i
		for j < len(uniq) && uniq[j] < first+int64(t.hdr.ShardRows) {
			j++
		}
		l := t.pin(s)
		pins = append(pins, l)
		t.shards[s].heat.Add(uint64((j - i) * rb))
		d, devBase := t.readCopy(l)
		// Coalesce rows into runs of adjacent sectors up to MaxPiece; the
		// runs' buffers are carved from one aligned allocation below.
		for k := i; k < j; {
			sec := d.sector
			runA := (devBase + (uniq[k]-first)*int64(rb)) / sec * sec
			runB := runA
			m := k
			for m < j {
				ra := devBase + (uniq[m]-first)*int64(rb)
				a := ra / sec * sec
				b := (ra + int64(rb) + sec - 1) / sec * sec
				if m > k && (a > runB || b-runA > maxPiece) {
					break
				}
				runB = max(runB, b)
				m++
			}
			lo, hi := k, m
			ra0 := runA
			p := &piece{dev: d, off: runA, size: int(runB - runA)}
			p.after = func() {
				buf := p.buf
				for u := lo; u < hi; u++ {
					src := devBase + (uniq[u]-first)*int64(rb) - ra0
					copy(rowData[u*rb:(u+1)*rb], buf[src:src+int64(rb)])
				}
			}
			pieces = append(pieces, p)
			k = m
		}
		i = j
	}
	carve(pieces)
	t.tier.useful.Add(uint64(len(r.Indices) * rb))
	t.tier.startAsync(len(r.Indices), len(r.Indices)*rb, pieces, func(err error) {
		for _, l := range pins {
			l.refs.Add(-1)
		}
		if err != nil {
			t.tier.log.Error("embedding lookup failed", zap.Uint64("table_ino", uint64(t.in.Ino)), zap.Uint64("tag", r.Tag), zap.Error(err))
			done(EncodeResult(r.Tag, syscall.EIO, 0, 0, nil))
			return
		}
		pos := func(idx int64) int { return sort.Search(len(uniq), func(i int) bool { return uniq[i] >= idx }) }
		if r.Mode == ModeGather {
			out := make([]byte, len(r.Indices)*rb)
			for i, idx := range r.Indices {
				u := pos(idx)
				copy(out[i*rb:], rowData[u*rb:(u+1)*rb])
			}
			done(EncodeResult(r.Tag, 0, len(r.Indices), t.hdr.Dtype, out))
			return
		}
		dim := int(t.hdr.Dim)
		acc := make([]float32, dim)
		out := make([]byte, len(r.Offsets)*dim*4)
		for bag := range r.Offsets {
			a, b := r.Offsets[bag], int64(len(r.Indices))
			if bag+1 < len(r.Offsets) {
				b = r.Offsets[bag+1]
			}
			clear(acc)
			for k := a; k < b; k++ {
				u := pos(r.Indices[k])
				w := float32(1)
				if r.Weights != nil {
					w = r.Weights[k]
				}
				accumulate(acc, rowData[u*rb:(u+1)*rb], t.hdr.Dtype, w)
			}
			if r.Mode == ModeMean && b > a {
				inv := 1 / float32(b-a)
				for i := range acc {
					acc[i] *= inv
				}
			}
			o := out[bag*dim*4:]
			for i, v := range acc {
				le.PutUint32(o[4*i:], math.Float32bits(v))
			}
		}
		done(EncodeResult(r.Tag, 0, len(r.Offsets), format.DtypeF32, out))
	})
}

// accumulate adds w * row (in dtype) into acc.
func accumulate(acc []float32, row []byte, dtype uint8, w float32) {
	switch dtype {
	case format.DtypeF32:
		for i := range acc {
			acc[i] += w * math.Float32frombits(le.Uint32(row[4*i:]))
		}
	case format.DtypeF16:
		for i := range acc {
			acc[i] += w * F16ToF32(le.Uint16(row[2*i:]))
		}
	case format.DtypeBF16:
		for i := range acc {
			acc[i] += w * math.Float32frombits(uint32(le.Uint16(row[2*i:]))<<16)
		}
	}
}

// F16ToF32 converts an IEEE 754 half-precision value.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}
