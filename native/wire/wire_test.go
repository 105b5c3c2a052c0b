package wire

import (
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, s := range samples() {
		b := mustAppend(t, s.id, s.msg)
		h, m, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: Decode: %v", s.name, err)
		}
		want := Header{Version: Version, Type: s.msg.Type(), ID: s.id, BodyLen: uint32(len(b) - HeaderSize)}
		if h != want {
			t.Errorf("%s: header %+v, want %+v", s.name, h, want)
		}
		if !reflect.DeepEqual(m, s.msg) {
			t.Errorf("%s: decoded %+v, want %+v", s.name, m, s.msg)
		}
		// The server's way: the header, then exactly its body.
		h2, err := DecodeHeader(b[:HeaderSize])
		if err != nil || h2 != h {
			t.Fatalf("%s: DecodeHeader = %+v, %v", s.name, h2, err)
		}
		if m2, err := DecodeBody(h2, b[HeaderSize:]); err != nil || !reflect.DeepEqual(m2, s.msg) {
			t.Errorf("%s: DecodeBody = %+v, %v", s.name, m2, err)
		}
	}
}

// A Grant as large as MaxBody allows round-trips; one more extent is
// refused by the encoder.
func TestGrantMaxExtents(t *testing.T) {
	g := &Grant{Lease: 1}
	for i := range MaxExtents {
		g.Extents = append(g.Extents, Extent{FileOff: uint64(i) << 21, PoolOff: uint64(i) << 21, Length: 1 << 21})
	}
	b := mustAppend(t, 1, g)
	if len(b) > HeaderSize+MaxBody {
		t.Fatalf("%d extents encode to %d bytes, above MaxBody", MaxExtents, len(b))
	}
	if _, m, err := Decode(b); err != nil || !reflect.DeepEqual(m, g) {
		t.Fatalf("Decode: %v", err)
	}
	g.Extents = append(g.Extents, Extent{FileOff: 1 << 40, PoolOff: 0, Length: 1})
	if _, err := Append(nil, 1, g); err != ErrExtentCount {
		t.Fatalf("Append of %d extents: %v, want ErrExtentCount", len(g.Extents), err)
	}
}

// golden pins the bytes of one frame of each type, for the Python client's
// test to check against the same hex.
var golden = map[string]string{
	// header: magic version type id length | body fields in doc order
	"Hello":      "444e4e57 0100 0100 01000000 04000000 | 0100 0700",
	"HelloReply": "444e4e57 0100 0180 01000000 12000000 | 0000000002000000 00100000 03000000 0100",
	"Lease":      "444e4e57 0100 0200 02000000 15000000 | 0000200000000000 0000400000000000 01000000 02",
	"Grant": "444e4e57 0100 0280 02000000 78000000 | 0900000000000000 0000300000000000 01000000 03000000" +
		" | 0000200000000000 0000000400000000 0000100000000000 00000000 00000000" +
		" | 0000300000000000 0000000600000000 0000200000000000 01000000 00000000" +
		" | 0000600000000000 0000000800000000 0010000000000000 01000000 00000000",
	"Commit":       "444e4e57 0100 0300 03000000 14000000 | 0900000000000000 0000500000000000 00000000",
	"CommitReply":  "444e4e57 0100 0380 03000000 08000000 | 0000500000000000",
	"Release":      "444e4e57 0100 0400 04000000 08000000 | 0900000000000000",
	"ReleaseReply": "444e4e57 0100 0480 04000000 00000000 |",
	"ErrorReply":   "444e4e57 0100 ffff 05000000 1d000000 | 09000000 1700 6c656173653a206e6f74206120646e6e66732066696c65", // "lease: not a dnnfs file"
}

func TestGolden(t *testing.T) {
	for _, s := range samples() {
		got := hex.EncodeToString(mustAppend(t, s.id, s.msg))
		want := strings.NewReplacer(" ", "", "|", "").Replace(golden[s.name])
		if got != want {
			t.Errorf("%s: encodes to\n%s\nwant\n%s", s.name, got, want)
		}
		b, _ := hex.DecodeString(want)
		if _, m, err := Decode(b); err != nil || !reflect.DeepEqual(m, s.msg) {
			t.Errorf("%s: golden decodes to %+v, %v", s.name, m, err)
		}
	}
}

func TestErrorReply(t *testing.T) {
	e := NewError(syscall.ENOENT, strings.Repeat("é", MaxText)+"\xff")
	if len(e.Text) > MaxText || !errors.Is(e, syscall.ENOENT) {
		t.Fatalf("NewError: %d bytes, errno %v", len(e.Text), e.Errno)
	}
	mustAppend(t, 1, e)
	if FDs(&Lease{}) != 1 || FDs(&Grant{Flags: GrantPoolFD}) != 1 || FDs(&Grant{}) != 0 || FDs(&Hello{}) != 0 {
		t.Fatal("FDs: a Lease carries one, a Grant one with GrantPoolFD, others none")
	}
}
