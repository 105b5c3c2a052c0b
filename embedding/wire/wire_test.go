package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"syscall"
	"testing"

	"github.com/dnnfs/dnnfs/embedding/wire"
	"github.com/dnnfs/dnnfs/format"
)

var le = binary.LittleEndian

// The format of the package doc, written out by hand. The same bytes are
// in client/lookup_test.go and python/test_dnnfs_wire.py.
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

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var goldenReq = wire.Request{Tag: 0x0102030405060708, Mode: wire.Sum, Dtype: wire.F16,
	Indices: []int64{3, 0, 7}, Offsets: []int64{0, 2}, Weights: []float32{1, 0.5, -2}}

func TestGolden(t *testing.T) {
	got, err := wire.EncodeRequest(&goldenReq)
	if err != nil {
		t.Fatal(err)
	}
	want := unhex(t, goldenRequest)
	if !bytes.Equal(got, want) {
		t.Fatalf("request\n got %x\nwant %x", got, want)
	}
	if wire.RequestLength(want) != uint64(len(want)) || wire.RequestLength(want[:47]) != 0 {
		t.Fatalf("RequestLength")
	}
	r, err := wire.DecodeRequest(want, 8, wire.F16)
	if err != nil || !reflect.DeepEqual(*r, goldenReq) {
		t.Fatalf("decoded %+v, %v", r, err)
	}

	res := unhex(t, goldenResult)
	payload := res[wire.ResultHeaderSize:]
	if enc := wire.EncodeResult(0x0102030405060708, 0, 2, wire.F16, payload); !bytes.Equal(enc, res) {
		t.Fatalf("result\n got %x\nwant %x", enc, res)
	}
	if n, err := wire.ResultLength(res); err != nil || n != len(res) || wire.ResultTag(res) != 0x0102030405060708 {
		t.Fatalf("ResultLength %d, %v", n, err)
	}
	d, err := wire.DecodeResult(res)
	if err != nil || d.Count != 2 || d.Dtype != wire.F16 || d.Err() != nil {
		t.Fatalf("%+v, %v", d, err)
	}
	v, err := d.Float32s()
	if err != nil || !reflect.DeepEqual(v, []float32{1, -2, 65504, 0x1p-24}) {
		t.Fatalf("values %v, %v", v, err)
	}
}

// The dtype numbers are the table descriptor's.
func TestDtypesMatchFormat(t *testing.T) {
	for _, c := range []struct {
		w wire.Dtype
		f uint8
	}{{wire.F32, format.DtypeF32}, {wire.F16, format.DtypeF16}, {wire.BF16, format.DtypeBF16}} {
		if uint8(c.w) != c.f || c.w.Size() != format.DtypeSize(c.f) {
			t.Errorf("%v = %d (size %d), format says %d (size %d)", c.w, c.w, c.w.Size(), c.f, format.DtypeSize(c.f))
		}
		if d, err := wire.ParseDtype(c.w.String()); err != nil || d != c.w {
			t.Errorf("ParseDtype(%q) = %v, %v", c.w.String(), d, err)
		}
	}
	for _, s := range []string{"", "f64", "int8"} {
		if _, err := wire.ParseDtype(s); err == nil {
			t.Errorf("ParseDtype(%q): no error", s)
		}
	}
	if wire.Dtype(0).Size() != 0 || wire.Dtype(9).String() != "dtype(9)" || wire.Mode(3).String() != "mode(3)" {
		t.Error("unknown dtype or mode")
	}
}

// randRequest makes a valid request for a table of rows rows.
func randRequest(rng *rand.Rand, rows uint64) wire.Request {
	r := wire.Request{Tag: rng.Uint64(), Mode: wire.Mode(rng.IntN(3)), Dtype: wire.Dtype(1 + rng.IntN(3))}
	n := rng.IntN(20)
	r.Indices = make([]int64, n)
	for i := range r.Indices {
		r.Indices[i] = rng.Int64N(int64(rows))
	}
	if r.Mode == wire.Gather {
		r.Offsets = []int64{}
		return r
	}
	nb := 1 + rng.IntN(5)
	r.Offsets = make([]int64, nb)
	for j := 1; j < nb; j++ {
		r.Offsets[j] = r.Offsets[j-1] + rng.Int64N(int64(n-int(r.Offsets[j-1]))+1)
	}
	if r.Mode == wire.Sum && rng.IntN(2) == 0 {
		r.Weights = make([]float32, n)
		for i := range r.Weights {
			r.Weights[i] = rng.Float32()*4 - 2
		}
	}
	return r
}

func TestRequestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		r := randRequest(rng, 100)
		b, err := wire.EncodeRequest(&r)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		got, err := wire.DecodeRequest(b, 100, r.Dtype)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if !reflect.DeepEqual(*got, r) {
			t.Fatalf("round trip\n got %+v\nwant %+v", *got, r)
		}
	}
}

func TestResultRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 1000; i++ {
		dt := wire.Dtype(1 + rng.IntN(3))
		count, dim := rng.IntN(5), 1+rng.IntN(4)
		payload := make([]byte, count*dim*dt.Size())
		for k := range payload {
			payload[k] = byte(rng.Uint32())
		}
		b := wire.EncodeResult(rng.Uint64(), 0, count, dt, payload)
		r, err := wire.DecodeResult(b)
		if err != nil || r.Count != count || r.Dtype != dt || !bytes.Equal(r.Payload, payload) || r.Tag != wire.ResultTag(b) {
			t.Fatalf("%+v, %v", r, err)
		}
	}
	b := wire.EncodeResult(7, syscall.EIO, 0, 0, nil)
	r, err := wire.DecodeResult(b)
	var se *wire.StatusError
	if err != nil || !errors.Is(r.Err(), syscall.EIO) || !errors.As(r.Err(), &se) || se.Tag != 7 {
		t.Fatalf("EIO result: %+v, %v", r, err)
	}
}

func TestDecodeRequestFieldErrors(t *testing.T) {
	enc := func(r wire.Request) []byte {
		b, err := wire.EncodeRequest(&r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := enc(wire.Request{Tag: 1, Mode: wire.Sum, Dtype: wire.F32, Indices: []int64{1, 2}, Offsets: []int64{0}})
	patch := func(off int, v uint64, size int) []byte {
		b := bytes.Clone(good)
		switch size {
		case 1:
			b[off] = byte(v)
		case 2:
			le.PutUint16(b[off:], uint16(v))
		case 4:
			le.PutUint32(b[off:], uint32(v))
		case 8:
			le.PutUint64(b[off:], v)
		}
		return b
	}
	// Weights with mode mean, built by hand (EncodeRequest refuses).
	weightsMean := append(patch(16, uint64(wire.FlagWeights), 4), make([]byte, 8)...)
	weightsMean[6] = byte(wire.Mean)
	le.PutUint64(weightsMean[40:], uint64(len(weightsMean)))
	for i, c := range []struct {
		field string
		req   []byte
	}{
		{"length", good[:47]},
		{"magic", patch(0, 1, 4)},
		{"version", patch(4, 2, 2)},
		{"mode", patch(6, 3, 1)},
		{"dtype", patch(7, 2, 1)},
		{"flags", patch(16, 2, 4)},
		{"n", patch(24, wire.MaxIndices+1, 8)},
		{"b", patch(32, wire.MaxIndices+1, 8)},
		{"length", patch(40, 200, 8)},
		{"length", good[:len(good)-1]},
		{"indices", patch(48+8, 100, 8)},
		{"indices", patch(48, math.MaxUint64, 8)},
		{"offsets", patch(48+16, 1, 8)},
		{"flags", weightsMean},
	} {
		_, err := wire.DecodeRequest(c.req, 10, wire.F32)
		var fe *wire.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("case %d: got %v, want a FieldError on %q", i, err, c.field)
		}
	}
	// Gather with offsets; pooling without bags.
	g := enc(wire.Request{Mode: wire.Gather, Dtype: wire.F32, Indices: []int64{1}})
	g = append(g, make([]byte, 8)...)
	le.PutUint64(g[32:], 1)
	le.PutUint64(g[40:], uint64(len(g)))
	if _, err := wire.DecodeRequest(g, 10, wire.F32); !isField(err, "b") {
		t.Errorf("gather with offsets: %v", err)
	}
	s := enc(wire.Request{Mode: wire.Gather, Dtype: wire.F32, Indices: []int64{1}})
	s[6] = byte(wire.Mean)
	if _, err := wire.DecodeRequest(s, 10, wire.F32); !isField(err, "b") {
		t.Errorf("mean without bags: %v", err)
	}
}

func isField(err error, field string) bool {
	var fe *wire.FieldError
	return errors.As(err, &fe) && fe.Field == field
}

func TestEncodeRequestInvalid(t *testing.T) {
	for _, c := range []struct {
		r     wire.Request
		field string
	}{
		{wire.Request{Mode: 3, Dtype: wire.F32}, "mode"},
		{wire.Request{Mode: wire.Gather, Dtype: 4}, "dtype"},
		{wire.Request{Mode: wire.Gather, Dtype: wire.F32, Indices: []int64{1}, Offsets: []int64{0}}, "offsets"},
		{wire.Request{Mode: wire.Sum, Dtype: wire.F32, Indices: []int64{1}}, "offsets"},
		{wire.Request{Mode: wire.Mean, Dtype: wire.F32, Indices: []int64{1}, Offsets: []int64{0}, Weights: []float32{1}}, "weights"},
		{wire.Request{Mode: wire.Sum, Dtype: wire.F32, Indices: []int64{1}, Offsets: []int64{0}, Weights: []float32{}}, "weights"},
		{wire.Request{Mode: wire.Gather, Dtype: wire.F32, Indices: []int64{-1}}, "indices"},
		{wire.Request{Mode: wire.Sum, Dtype: wire.F32, Indices: []int64{1, 2}, Offsets: []int64{0, 3}}, "offsets"},
		{wire.Request{Mode: wire.Sum, Dtype: wire.F32, Indices: []int64{1, 2}, Offsets: []int64{0, 2, 1}}, "offsets"},
	} {
		if b, err := wire.EncodeRequest(&c.r); !isField(err, c.field) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%+v: got %x, %v; want a FieldError on %s", c.r, b, err, c.field)
		}
	}
}

// FuzzDecodeRequest: the decoder never panics, and what it accepts is a
// valid request that encodes back to the same bytes (reserved zeroed).
func FuzzDecodeRequest(f *testing.F) {
	f.Add(unhex(f, goldenRequest), uint64(8), uint8(wire.F16))
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20; i++ {
		r := randRequest(rng, 50)
		b, _ := wire.EncodeRequest(&r)
		f.Add(b, uint64(50), uint8(r.Dtype))
	}
	f.Fuzz(func(t *testing.T, b []byte, rows uint64, dtype uint8) {
		table := wire.Dtype(1 + dtype%3) // a table's dtype is always one of the three
		r, err := wire.DecodeRequest(b, rows, table)
		if err != nil {
			var fe *wire.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a FieldError", err)
			}
			return
		}
		if wire.RequestLength(b) != uint64(len(b)) {
			t.Fatalf("accepted %d bytes, header says %d", len(b), wire.RequestLength(b))
		}
		for _, v := range r.Indices {
			if v < 0 || uint64(v) >= rows {
				t.Fatalf("index %d accepted for %d rows", v, rows)
			}
		}
		back, err := wire.EncodeRequest(r)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", r, err)
		}
		want := bytes.Clone(b)
		clear(want[20:24])
		if !bytes.Equal(back, want) {
			t.Fatalf("round trip\n got %x\nwant %x", back, want)
		}
	})
}

// FuzzDecodeResult: the decoder never panics, agrees with ResultLength,
// and what it accepts encodes back to the same bytes (reserved zeroed).
func FuzzDecodeResult(f *testing.F) {
	f.Add(unhex(f, goldenResult))
	f.Add(wire.EncodeResult(3, syscall.EIO, 0, 0, nil))
	f.Add(wire.EncodeResult(4, 0, 2, wire.F32, make([]byte, 16)))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := wire.DecodeResult(b)
		n, lerr := wire.ResultLength(b)
		if err != nil {
			if !errors.Is(err, wire.ErrBadResult) {
				t.Fatalf("error %v does not wrap ErrBadResult", err)
			}
			return
		}
		if lerr != nil || n != len(b) {
			t.Fatalf("accepted %d bytes, ResultLength says %d, %v", len(b), n, lerr)
		}
		if v, err := r.Float32s(); err != nil || len(v)*max(r.Dtype.Size(), 1) != len(r.Payload) {
			t.Fatalf("Float32s: %d values, %v", len(v), err)
		}
		back := wire.EncodeResult(r.Tag, r.Status, r.Count, r.Dtype, r.Payload)
		want := bytes.Clone(b)
		clear(want[29:32])
		if !bytes.Equal(back, want) {
			t.Fatalf("round trip\n got %x\nwant %x", back, want)
		}
	})
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

func TestF16ToFloat32(t *testing.T) {
	for _, c := range []struct {
		h    uint16
		want float32
	}{
		{0x3C00, 1}, {0xC000, -2}, {0x7BFF, 65504}, {0xFBFF, -65504},
		{0x0001, 0x1p-24},        // smallest subnormal
		{0x03FF, 1023 * 0x1p-24}, // largest subnormal
		{0x8001, -0x1p-24},       // negative subnormal
		{0x0400, 0x1p-14},        // smallest normal
		{0x3555, 0.333251953125}, // 1/3 rounded
		{0x3BFF, 0.99951171875},  // largest below 1
		{0x3C01, 1.0009765625},   // smallest above 1
		{0x4248, 3.140625},       // pi rounded
		{0x0000, 0},
	} {
		if got := wire.F16ToFloat32(c.h); got != c.want {
			t.Errorf("f16 %#04x = %g, want %g", c.h, got, c.want)
		}
	}
	if got := wire.F16ToFloat32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("f16 0x8000 = %g, want -0", got)
	}
	if got := wire.F16ToFloat32(0x7C00); !math.IsInf(float64(got), 1) {
		t.Errorf("f16 0x7C00 = %g, want +Inf", got)
	}
	if got := wire.F16ToFloat32(0xFC00); !math.IsInf(float64(got), -1) {
		t.Errorf("f16 0xFC00 = %g, want -Inf", got)
	}
	for _, h := range []uint16{0x7E00, 0x7C01, 0xFE00} {
		if got := wire.F16ToFloat32(h); !math.IsNaN(float64(got)) {
			t.Errorf("f16 %#04x = %g, want NaN", h, got)
		}
	}
	// Every half, against the definition.
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got, want := wire.F16ToFloat32(h), f16Ref(h)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("f16 %#04x = %g, want NaN", h, got)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != (h&0x8000 != 0) {
			t.Fatalf("f16 %#04x = %g, want %g", h, got, want)
		}
	}
}

func TestBF16ToFloat32(t *testing.T) {
	for _, c := range []struct {
		h    uint16
		want float32
	}{
		{0x3F80, 1}, {0xC000, -2}, {0x4049, 3.140625}, {0x3F00, 0.5},
		{0x7F7F, 0x1.fep127}, // largest finite
		{0x0080, 0x1p-126},   // smallest normal
		{0x0001, 0x1p-133},   // smallest subnormal
		{0x0000, 0},
	} {
		if got := wire.BF16ToFloat32(c.h); got != c.want {
			t.Errorf("bf16 %#04x = %g, want %g", c.h, got, c.want)
		}
	}
	if got := wire.BF16ToFloat32(0x7F80); !math.IsInf(float64(got), 1) {
		t.Errorf("bf16 0x7F80 = %g, want +Inf", got)
	}
	if got := wire.BF16ToFloat32(0x7FC0); !math.IsNaN(float64(got)) {
		t.Errorf("bf16 0x7FC0 = %g, want NaN", got)
	}
}
