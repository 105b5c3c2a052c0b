package wire

import (
	"math"
	"testing"
)

// frameOf encodes a valid message; the malformed cases patch its bytes.
func frameOf(t testing.TB, name string) []byte {
	for _, s := range samples() {
		if s.name == name {
			return mustAppend(t, s.id, s.msg)
		}
	}
	t.Fatalf("no sample %q", name)
	return nil
}

// Patches at a header offset, or at a body offset (HeaderSize+off).
func put16(b []byte, off int, v uint16) []byte { le.PutUint16(b[off:], v); return b }
func put32(b []byte, off int, v uint32) []byte { le.PutUint32(b[off:], v); return b }
func put64(b []byte, off int, v uint64) []byte { le.PutUint64(b[off:], v); return b }

const (
	hType = 6
	hLen  = 12
	body  = HeaderSize
	ext0  = body + GrantSize // the Grant sample's first extent
	ext1  = ext0 + ExtentSize
)

// grow appends n zero bytes to a frame's body and its length.
func grow(b []byte, n int) []byte {
	b = append(b, make([]byte, n)...)
	return put32(b, hLen, uint32(len(b)-HeaderSize))
}

// malformedCase is a frame Decode must refuse with want; frames.go's
// TestWriteFrames gives the same table to the Python codec's test.
type malformedCase struct {
	name  string
	frame func() []byte
	want  error
}

func malformedCases(t testing.TB) []malformedCase {
	return []malformedCase{
		{"short header", func() []byte { return frameOf(t, "Hello")[:HeaderSize-1] }, ErrShort},
		{"short body", func() []byte { b := frameOf(t, "Lease"); return b[:len(b)-1] }, ErrShort},
		{"magic", func() []byte { b := frameOf(t, "Hello"); b[3] = 'X'; return b }, ErrMagic},
		{"version 0", func() []byte { return put16(frameOf(t, "Hello"), 4, 0) }, ErrVersion},
		{"version 2", func() []byte { return put16(frameOf(t, "Hello"), 4, MaxVersion+1) }, ErrVersion},
		{"type 5", func() []byte { return put16(frameOf(t, "Hello"), hType, 5) }, ErrType},
		{"type 0x8000", func() []byte { return put16(frameOf(t, "Hello"), hType, 0x8000) }, ErrType},
		{"body over MaxBody", func() []byte { return put32(frameOf(t, "Grant")[:HeaderSize], hLen, MaxBody+1) }, ErrTooLarge},
		{"body length 4 GiB", func() []byte { return put32(frameOf(t, "Grant")[:HeaderSize], hLen, math.MaxUint32) }, ErrTooLarge},
		{"hello body too long", func() []byte { return grow(frameOf(t, "Hello"), 1) }, ErrBodyLength},
		{"release body too short", func() []byte { b := frameOf(t, "Release"); return put32(b[:len(b)-1], hLen, 7) }, ErrBodyLength},
		{"release reply with body", func() []byte { return grow(frameOf(t, "ReleaseReply"), 8) }, ErrBodyLength},
		{"grant part of an extent", func() []byte { return grow(frameOf(t, "Grant"), 16) }, ErrBodyLength},
		{"grant count above extents", func() []byte { return put32(frameOf(t, "Grant"), body+20, 4) }, ErrExtentCount},
		{"grant count 2^32-1", func() []byte { return put32(frameOf(t, "Grant"), body+20, math.MaxUint32) }, ErrExtentCount},
		{"grant count below extents", func() []byte { return put32(frameOf(t, "Grant"), body+20, 2) }, ErrExtentCount},
		{"error text beyond body", func() []byte { return put16(frameOf(t, "ErrorReply"), body+4, 24) }, ErrBodyLength},
		{"error body over MaxText", func() []byte { return grow(frameOf(t, "ErrorReply"), MaxText) }, ErrBodyLength},
		{"trailing byte", func() []byte { return append(frameOf(t, "Commit"), 0) }, ErrTrailing},
		{"lease length 0", func() []byte { return put64(frameOf(t, "Lease"), body+8, 0) }, ErrZeroLength},
		{"extent length 0", func() []byte { return put64(frameOf(t, "Grant"), ext1+16, 0) }, ErrZeroLength},
		{"lease end past MaxOffset", func() []byte {
			return put64(put64(frameOf(t, "Lease"), body, MaxOffset), body+8, 1)
		}, ErrOverflow},
		{"lease offset+length wraps", func() []byte {
			return put64(put64(frameOf(t, "Lease"), body, math.MaxUint64), body+8, 2)
		}, ErrOverflow},
		{"extent pool end past MaxOffset", func() []byte { return put64(frameOf(t, "Grant"), ext0+8, MaxOffset) }, ErrOverflow},
		{"commit size past MaxOffset", func() []byte { return put64(frameOf(t, "Commit"), body+8, MaxOffset+1) }, ErrOverflow},
		{"commit reply size past MaxOffset", func() []byte { return put64(frameOf(t, "CommitReply"), body, math.MaxUint64) }, ErrOverflow},
		{"mode 0", func() []byte { b := frameOf(t, "Lease"); b[body+20] = 0; return b }, ErrMode},
		{"mode 3", func() []byte { b := frameOf(t, "Lease"); b[body+20] = 3; return b }, ErrMode},
		{"lease unknown flag", func() []byte { return put32(frameOf(t, "Lease"), body+16, 1<<1) }, ErrFlags},
		{"extend on a read lease", func() []byte { b := frameOf(t, "Lease"); b[body+20] = byte(ModeRead); return b }, ErrFlags},
		{"hello reply unknown flag", func() []byte { return put32(frameOf(t, "HelloReply"), body+12, 1<<2) }, ErrFlags},
		{"grant unknown flag", func() []byte { return put32(frameOf(t, "Grant"), body+16, 1<<31) }, ErrFlags},
		{"extent unknown flag", func() []byte { return put32(frameOf(t, "Grant"), ext1+24, 1<<1) }, ErrFlags},
		{"commit unknown flag", func() []byte { return put32(frameOf(t, "Commit"), body+16, 1<<1) }, ErrFlags},
		{"keep size with a size", func() []byte { return put32(frameOf(t, "Commit"), body+16, uint32(CommitKeepSize)) }, ErrFlags},
		{"extent reserved", func() []byte { return put32(frameOf(t, "Grant"), ext0+28, 1) }, ErrReserved},
		{"hello min 0", func() []byte { return put16(frameOf(t, "Hello"), body, 0) }, ErrVersionRange},
		{"hello min above max", func() []byte { return put16(frameOf(t, "Hello"), body, 8) }, ErrVersionRange},
		{"hello reply version 0", func() []byte { return put16(frameOf(t, "HelloReply"), body+16, 0) }, ErrVersion},
		{"hello reply version 2", func() []byte { return put16(frameOf(t, "HelloReply"), body+16, 2) }, ErrVersion},
		{"block size 0", func() []byte { return put32(frameOf(t, "HelloReply"), body+8, 0) }, ErrBlockSize},
		{"block size 3000", func() []byte { return put32(frameOf(t, "HelloReply"), body+8, 3000) }, ErrBlockSize},
		{"grant lease 0", func() []byte { return put64(frameOf(t, "Grant"), body, 0) }, ErrNoLease},
		{"commit lease 0", func() []byte { return put64(frameOf(t, "Commit"), body, 0) }, ErrNoLease},
		{"release lease 0", func() []byte { return put64(frameOf(t, "Release"), body, 0) }, ErrNoLease},
		{"extents overlap", func() []byte { return put64(frameOf(t, "Grant"), ext1, 2<<20) }, ErrExtentOrder},
		{"extents out of order", func() []byte { return put64(frameOf(t, "Grant"), ext1, 0) }, ErrExtentOrder},
		{"errno 0", func() []byte { return put32(frameOf(t, "ErrorReply"), body, 0) }, ErrErrno},
		{"text not UTF-8", func() []byte { b := frameOf(t, "ErrorReply"); b[len(b)-1] = 0xff; return b }, ErrText},
		{"text length over MaxText", func() []byte { return put16(frameOf(t, "ErrorReply"), body+4, MaxText+1) }, ErrText},
	}
}

func TestMalformed(t *testing.T) {
	for _, c := range malformedCases(t) {
		t.Run(c.name, func(t *testing.T) {
			b := c.frame()
			if _, m, err := Decode(b); err != c.want {
				t.Fatalf("Decode(%x) = %+v, %v; want %v", b, m, err, c.want)
			}
		})
	}
}

// refusedMessage is a message Append must refuse with want.
type refusedMessage struct {
	m    Message
	want error
}

var appendRefuses = []refusedMessage{
	{&Hello{MinVersion: 2, MaxVersion: 1}, ErrVersionRange},
	{&HelloReply{BlockSize: 4096}, ErrVersion},
	{&Lease{Length: 1}, ErrMode},
	{&Lease{Mode: ModeRead, Offset: 1}, ErrZeroLength},
	{&Lease{Mode: ModeRead, Offset: MaxOffset, Length: 1}, ErrOverflow},
	{&Grant{}, ErrNoLease},
	{&Grant{Lease: 1, Extents: []Extent{{Length: 2}, {FileOff: 1, Length: 1}}}, ErrExtentOrder},
	{&Commit{Lease: 1, Size: 1, Flags: CommitKeepSize}, ErrFlags},
	{&Release{}, ErrNoLease},
	{&ErrorReply{Text: "x"}, ErrErrno},
	{&ErrorReply{Errno: 1 << 32}, ErrErrno},
	{&ErrorReply{Errno: 1, Text: "\xff"}, ErrText},
}

// Append refuses what Decode would, so a peer never gets such a frame.
func TestAppendRefuses(t *testing.T) {
	for _, c := range appendRefuses {
		b, err := Append([]byte("keep"), 1, c.m)
		if err != c.want || string(b) != "keep" {
			t.Errorf("Append(%T %+v) = %q, %v; want %v and b unchanged", c.m, c.m, b, err, c.want)
		}
	}
}
