package wire

import (
	"encoding/binary"
	"slices"
	"strconv"
)

// The constants of the framing (package doc, "Header").
const (
	Magic      uint32 = 0x574E4E44 // "DNNW" little-endian
	MinVersion uint16 = 1          // the oldest version this package speaks
	MaxVersion uint16 = 1          // the newest; Append writes it
	Version           = MaxVersion
	// HelloVersion is the header version of Hello and HelloReply in
	// every version, so negotiation works across all of them.
	HelloVersion uint16 = 1

	HeaderSize = 16
	// MaxBody bounds a body, so a header cannot make a reader allocate
	// more; a reader refuses a larger one before reading it.
	MaxBody = 64 << 10
	// MaxOffset is the largest file or pool offset (off_t is signed).
	MaxOffset = 1<<63 - 1
)

var le = binary.LittleEndian

// Type is a message's type code. A reply's code is its request's with
// bit 15 set, except TypeError, which answers any request.
type Type uint16

// These values are on the wire: never change them; add new ones.
const (
	TypeHello        Type = 0x0001
	TypeLease        Type = 0x0002
	TypeCommit       Type = 0x0003
	TypeRelease      Type = 0x0004
	TypeHelloReply   Type = 0x8001
	TypeGrant        Type = 0x8002
	TypeCommitReply  Type = 0x8003
	TypeReleaseReply Type = 0x8004
	TypeError        Type = 0xFFFF
)

// IsReply says whether a message of this type goes daemon → client.
func (t Type) IsReply() bool { return t&0x8000 != 0 }

func (t Type) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return "type(0x" + strconv.FormatUint(uint64(t), 16) + ")"
}

var typeNames = map[Type]string{
	TypeHello: "hello", TypeLease: "lease", TypeCommit: "commit", TypeRelease: "release",
	TypeHelloReply: "hello-reply", TypeGrant: "grant", TypeCommitReply: "commit-reply",
	TypeReleaseReply: "release-reply", TypeError: "error",
}

// RequestID pairs a reply with its request: the client picks it, the
// daemon echoes it.
type RequestID uint32

// Header is the fixed part of every frame.
type Header struct {
	Version uint16
	Type    Type
	ID      RequestID
	BodyLen uint32
}

// DecodeHeader reads the first HeaderSize bytes of b and checks
// everything a header alone can tell, including that BodyLen is at most
// MaxBody and fits Type, so a reader may then read BodyLen bytes.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrShort
	}
	if le.Uint32(b[0:]) != Magic {
		return Header{}, ErrMagic
	}
	h := Header{
		Version: le.Uint16(b[4:]),
		Type:    Type(le.Uint16(b[6:])),
		ID:      RequestID(le.Uint32(b[8:])),
		BodyLen: le.Uint32(b[12:]),
	}
	return h, h.check()
}

func (h Header) check() error {
	hello := h.Type == TypeHello || h.Type == TypeHelloReply
	switch {
	case hello && h.Version != HelloVersion,
		!hello && (h.Version < MinVersion || h.Version > MaxVersion):
		return ErrVersion
	case typeNames[h.Type] == "":
		return ErrType
	case h.BodyLen > MaxBody:
		return ErrTooLarge
	}
	return bodyLenFits(h.Type, h.BodyLen)
}

// bodyLenFits: the body lengths each type allows (package doc tables).
func bodyLenFits(t Type, n uint32) error {
	ok := false
	switch t {
	case TypeGrant:
		ok = n >= GrantSize && (n-GrantSize)%ExtentSize == 0
	case TypeError:
		ok = n >= ErrorSize && n-ErrorSize <= MaxText
	default:
		ok = n == uint32(fixedSize[t])
	}
	if !ok {
		return ErrBodyLength
	}
	return nil
}

// AppendHeader appends h's HeaderSize bytes to b.
func AppendHeader(b []byte, h Header) []byte {
	b = le.AppendUint32(b, Magic)
	b = le.AppendUint16(b, h.Version)
	b = le.AppendUint16(b, uint16(h.Type))
	b = le.AppendUint32(b, uint32(h.ID))
	return le.AppendUint32(b, h.BodyLen)
}

// Append checks m by the decoder's rules, so a peer never receives a
// frame it must refuse, and appends its frame (header at Version, or
// HelloVersion for Hello and HelloReply; then the body) to b. On error b
// is returned unchanged. (A second version will have it take the
// connection's version.)
func Append(b []byte, id RequestID, m Message) ([]byte, error) {
	if err := m.check(); err != nil {
		return b, err
	}
	n := m.bodyLen()
	if n > MaxBody {
		return b, ErrTooLarge
	}
	h := Header{Version: Version, Type: m.Type(), ID: id, BodyLen: uint32(n)}
	if h.Type == TypeHello || h.Type == TypeHelloReply {
		h.Version = HelloVersion
	}
	// One allocation for the whole frame, not one per growth step of a
	// Grant's extents.
	b = slices.Grow(b, HeaderSize+n)
	b = AppendHeader(b, h)
	return m.appendBody(b), nil
}

// DecodeBody decodes the body of a frame whose header DecodeHeader
// accepted; body must be exactly h.BodyLen bytes.
func DecodeBody(h Header, body []byte) (Message, error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	return decodeBody(h, body)
}

// decodeBody is DecodeBody for a header already checked.
func decodeBody(h Header, body []byte) (Message, error) {
	if len(body) < int(h.BodyLen) {
		return nil, ErrShort
	}
	if len(body) > int(h.BodyLen) {
		return nil, ErrTrailing
	}
	m, err := decoders[h.Type](body)
	if err != nil {
		return nil, err
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}

// Decode decodes b, which must hold exactly one frame. On error the
// Message is nil.
func Decode(b []byte) (Header, Message, error) {
	h, err := DecodeHeader(b)
	if err != nil {
		return h, nil, err
	}
	// DecodeHeader checked h: do not check it again.
	m, err := decodeBody(h, b[HeaderSize:])
	return h, m, err
}

// FDs is how many descriptors must travel with m's frame (SCM_RIGHTS, in
// the sendmsg that carries the frame's first byte; package doc
// "Descriptors").
func FDs(m Message) int {
	switch m := m.(type) {
	case *Lease:
		return 1
	case *Grant:
		if m.Flags&GrantPoolFD != 0 {
			return 1
		}
	}
	return 0
}
