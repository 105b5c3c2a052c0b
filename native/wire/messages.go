package wire

import (
	"strings"
	"syscall"
	"unicode/utf8"
)

// Body sizes (package doc tables). GrantSize and ErrorSize are the fixed
// parts before the extents and the text.
const (
	HelloSize        = 4
	HelloReplySize   = 18
	LeaseSize        = 21
	GrantSize        = 24
	ExtentSize       = 32
	CommitSize       = 20
	CommitReplySize  = 8
	ReleaseSize      = 8
	ReleaseReplySize = 0
	ErrorSize        = 6

	// MaxExtents is the most extents one Grant can carry within MaxBody.
	MaxExtents = (MaxBody - GrantSize) / ExtentSize
	// MaxText bounds an ErrorReply's text, in bytes.
	MaxText = 1024
)

var fixedSize = map[Type]int{
	TypeHello: HelloSize, TypeHelloReply: HelloReplySize, TypeLease: LeaseSize,
	TypeCommit: CommitSize, TypeCommitReply: CommitReplySize,
	TypeRelease: ReleaseSize, TypeReleaseReply: ReleaseReplySize,
}

// Message is one message body; the types of this package are all there
// are (the unexported methods keep it so).
type Message interface {
	Type() Type
	check() error
	bodyLen() int
	appendBody(b []byte) []byte
}

// decoders read a body whose length bodyLenFits accepted; DecodeBody
// then checks the result.
var decoders = map[Type]func(b []byte) (Message, error){
	TypeHello:        decodeHello,
	TypeHelloReply:   decodeHelloReply,
	TypeLease:        decodeLease,
	TypeGrant:        decodeGrant,
	TypeCommit:       decodeCommit,
	TypeCommitReply:  decodeCommitReply,
	TypeRelease:      decodeRelease,
	TypeReleaseReply: func([]byte) (Message, error) { return &ReleaseReply{}, nil },
	TypeError:        decodeError,
}

// LeaseID names a granted lease on its connection; 0 is never one.
type LeaseID uint64

// Flag sets, one type per field so they cannot be mixed up.
type (
	HelloFlags  uint32
	LeaseFlags  uint32
	GrantFlags  uint32
	ExtentFlags uint32
	CommitFlags uint32
)

// These values are on the wire: never change them; add new ones.
const (
	HelloDAX    HelloFlags = 1 << 0 // the pool is DAX memory: map with MAP_SYNC, flush with CLWB
	HelloWrites HelloFlags = 1 << 1 // this connection may get write leases

	LeaseExtend LeaseFlags = 1 << 0 // a write lease may reach past EOF

	GrantPoolFD GrantFlags = 1 << 0 // the pool descriptor is attached to this reply

	ExtentFresh ExtentFlags = 1 << 0 // newly allocated: in the file only after a Commit

	CommitKeepSize CommitFlags = 1 << 0 // leave the file size as it is (Size must be 0)

	helloFlagsV1  = HelloDAX | HelloWrites
	leaseFlagsV1  = LeaseExtend
	grantFlagsV1  = GrantPoolFD
	extentFlagsV1 = ExtentFresh
	commitFlagsV1 = CommitKeepSize
)

// Mode is a lease's access.
type Mode uint8

// These values are on the wire: never change them; add new ones.
const (
	ModeRead  Mode = 1 // a shared range lock
	ModeWrite Mode = 2 // an exclusive range lock
)

// Hello opens a connection: the versions the client speaks.
type Hello struct{ MinVersion, MaxVersion uint16 }

func (*Hello) Type() Type   { return TypeHello }
func (*Hello) bodyLen() int { return HelloSize }
func (m *Hello) check() error {
	if m.MinVersion == 0 || m.MinVersion > m.MaxVersion {
		return ErrVersionRange
	}
	return nil
}
func (m *Hello) appendBody(b []byte) []byte {
	return le.AppendUint16(le.AppendUint16(b, m.MinVersion), m.MaxVersion)
}
func decodeHello(b []byte) (Message, error) {
	return &Hello{le.Uint16(b), le.Uint16(b[2:])}, nil
}

// HelloReply answers Hello: the version chosen and the pool's geometry.
type HelloReply struct {
	PoolSize  uint64 // bytes
	BlockSize uint32 // bytes, a power of two
	Flags     HelloFlags
	Version   uint16
}

func (*HelloReply) Type() Type   { return TypeHelloReply }
func (*HelloReply) bodyLen() int { return HelloReplySize }
func (m *HelloReply) check() error {
	switch {
	case m.Version < MinVersion || m.Version > MaxVersion:
		return ErrVersion
	case m.BlockSize == 0 || m.BlockSize&(m.BlockSize-1) != 0:
		return ErrBlockSize
	case m.Flags&^helloFlagsV1 != 0:
		return ErrFlags
	}
	return nil
}
func (m *HelloReply) appendBody(b []byte) []byte {
	b = le.AppendUint64(b, m.PoolSize)
	b = le.AppendUint32(b, m.BlockSize)
	b = le.AppendUint32(b, uint32(m.Flags))
	return le.AppendUint16(b, m.Version)
}
func decodeHelloReply(b []byte) (Message, error) {
	return &HelloReply{le.Uint64(b), le.Uint32(b[8:]), HelloFlags(le.Uint32(b[12:])), le.Uint16(b[16:])}, nil
}

// Lease asks for a range of the file whose open descriptor travels with
// it (FDs).
type Lease struct {
	Offset, Length uint64
	Flags          LeaseFlags
	Mode           Mode
}

func (*Lease) Type() Type   { return TypeLease }
func (*Lease) bodyLen() int { return LeaseSize }
func (m *Lease) check() error {
	switch {
	case m.Mode != ModeRead && m.Mode != ModeWrite:
		return ErrMode
	case m.Flags&^leaseFlagsV1 != 0, m.Flags&LeaseExtend != 0 && m.Mode != ModeWrite:
		return ErrFlags
	}
	return checkRange(m.Offset, m.Length)
}
func (m *Lease) appendBody(b []byte) []byte {
	b = le.AppendUint64(b, m.Offset)
	b = le.AppendUint64(b, m.Length)
	b = le.AppendUint32(b, uint32(m.Flags))
	return append(b, byte(m.Mode))
}
func decodeLease(b []byte) (Message, error) {
	return &Lease{le.Uint64(b), le.Uint64(b[8:]), LeaseFlags(le.Uint32(b[16:])), Mode(b[20])}, nil
}

// checkRange: a non-empty range that ends at or below MaxOffset.
func checkRange(off, n uint64) error {
	switch {
	case n == 0:
		return ErrZeroLength
	case off > MaxOffset || n > MaxOffset-off:
		return ErrOverflow
	}
	return nil
}

// Extent maps Length bytes of the file at FileOff to the pool at PoolOff.
type Extent struct {
	FileOff, PoolOff, Length uint64
	Flags                    ExtentFlags
}

// Grant answers Lease: the lease and the extents of its range, in file
// order.
type Grant struct {
	Lease   LeaseID
	Size    uint64 // the file's size when granted
	Flags   GrantFlags
	Extents []Extent
}

func (*Grant) Type() Type     { return TypeGrant }
func (m *Grant) bodyLen() int { return GrantSize + ExtentSize*len(m.Extents) }
func (m *Grant) check() error {
	switch {
	case m.Lease == 0:
		return ErrNoLease
	case m.Flags&^grantFlagsV1 != 0:
		return ErrFlags
	case len(m.Extents) > MaxExtents:
		return ErrExtentCount
	}
	var end uint64
	for i, e := range m.Extents {
		if err := checkRange(e.FileOff, e.Length); err != nil {
			return err
		}
		if err := checkRange(e.PoolOff, e.Length); err != nil {
			return err
		}
		if e.Flags&^extentFlagsV1 != 0 {
			return ErrFlags
		}
		if i > 0 && e.FileOff < end {
			return ErrExtentOrder
		}
		end = e.FileOff + e.Length
	}
	return nil
}
func (m *Grant) appendBody(b []byte) []byte {
	b = le.AppendUint64(b, uint64(m.Lease))
	b = le.AppendUint64(b, m.Size)
	b = le.AppendUint32(b, uint32(m.Flags))
	b = le.AppendUint32(b, uint32(len(m.Extents)))
	for _, e := range m.Extents {
		b = le.AppendUint64(b, e.FileOff)
		b = le.AppendUint64(b, e.PoolOff)
		b = le.AppendUint64(b, e.Length)
		b = le.AppendUint32(b, uint32(e.Flags))
		b = le.AppendUint32(b, 0) // reserved
	}
	return b
}
func decodeGrant(b []byte) (Message, error) {
	m := &Grant{LeaseID(le.Uint64(b)), le.Uint64(b[8:]), GrantFlags(le.Uint32(b[16:])), nil}
	// The count is checked against the body (at most MaxBody) before
	// anything is sized by it.
	n := le.Uint32(b[20:])
	rest := b[GrantSize:]
	if uint64(n)*ExtentSize != uint64(len(rest)) {
		return nil, ErrExtentCount
	}
	if n > 0 {
		m.Extents = make([]Extent, n)
	}
	for i := range m.Extents {
		p := rest[i*ExtentSize:]
		if le.Uint32(p[28:]) != 0 {
			return nil, ErrReserved
		}
		m.Extents[i] = Extent{le.Uint64(p), le.Uint64(p[8:]), le.Uint64(p[16:]), ExtentFlags(le.Uint32(p[24:]))}
	}
	return m, nil
}

// Commit makes a write lease's stores part of the file, durably.
type Commit struct {
	Lease LeaseID
	Size  uint64 // the file's new size (0 with CommitKeepSize)
	Flags CommitFlags
}

func (*Commit) Type() Type   { return TypeCommit }
func (*Commit) bodyLen() int { return CommitSize }
func (m *Commit) check() error {
	switch {
	case m.Lease == 0:
		return ErrNoLease
	case m.Flags&^commitFlagsV1 != 0, m.Flags&CommitKeepSize != 0 && m.Size != 0:
		return ErrFlags
	case m.Size > MaxOffset:
		return ErrOverflow
	}
	return nil
}
func (m *Commit) appendBody(b []byte) []byte {
	b = le.AppendUint64(b, uint64(m.Lease))
	b = le.AppendUint64(b, m.Size)
	return le.AppendUint32(b, uint32(m.Flags))
}
func decodeCommit(b []byte) (Message, error) {
	return &Commit{LeaseID(le.Uint64(b)), le.Uint64(b[8:]), CommitFlags(le.Uint32(b[16:]))}, nil
}

// CommitReply answers Commit once it is durable: the file's size.
type CommitReply struct{ Size uint64 }

func (*CommitReply) Type() Type   { return TypeCommitReply }
func (*CommitReply) bodyLen() int { return CommitReplySize }
func (m *CommitReply) check() error {
	if m.Size > MaxOffset {
		return ErrOverflow
	}
	return nil
}
func (m *CommitReply) appendBody(b []byte) []byte { return le.AppendUint64(b, m.Size) }
func decodeCommitReply(b []byte) (Message, error) {
	return &CommitReply{le.Uint64(b)}, nil
}

// Release ends a lease (uncommitted fresh extents are freed).
type Release struct{ Lease LeaseID }

func (*Release) Type() Type   { return TypeRelease }
func (*Release) bodyLen() int { return ReleaseSize }
func (m *Release) check() error {
	if m.Lease == 0 {
		return ErrNoLease
	}
	return nil
}
func (m *Release) appendBody(b []byte) []byte { return le.AppendUint64(b, uint64(m.Lease)) }
func decodeRelease(b []byte) (Message, error) {
	return &Release{LeaseID(le.Uint64(b))}, nil
}

// ReleaseReply answers Release; it has no body.
type ReleaseReply struct{}

func (*ReleaseReply) Type() Type                 { return TypeReleaseReply }
func (*ReleaseReply) bodyLen() int               { return ReleaseReplySize }
func (*ReleaseReply) check() error               { return nil }
func (*ReleaseReply) appendBody(b []byte) []byte { return b }

// ErrorReply answers a request that failed. It is an error itself, and
// unwraps to its errno so errors.Is(err, syscall.ENOENT) works.
type ErrorReply struct {
	Errno syscall.Errno
	Text  string
}

// NewError returns an ErrorReply whose text is cut to MaxText bytes at a
// rune boundary (and made valid UTF-8), so it always encodes.
func NewError(errno syscall.Errno, text string) *ErrorReply {
	text = strings.ToValidUTF8(text, "\uFFFD")
	for len(text) > MaxText {
		_, n := utf8.DecodeLastRuneInString(text)
		text = text[:len(text)-n]
	}
	return &ErrorReply{errno, text}
}

func (e *ErrorReply) Error() string {
	return "dnnfs native: " + e.Errno.Error() + ": " + e.Text
}
func (e *ErrorReply) Unwrap() error { return e.Errno }

func (*ErrorReply) Type() Type     { return TypeError }
func (e *ErrorReply) bodyLen() int { return ErrorSize + len(e.Text) }
func (e *ErrorReply) check() error {
	switch {
	case e.Errno == 0, uint64(e.Errno) > 1<<32-1:
		return ErrErrno
	case len(e.Text) > MaxText || !utf8.ValidString(e.Text):
		return ErrText
	}
	return nil
}
func (e *ErrorReply) appendBody(b []byte) []byte {
	b = le.AppendUint32(b, uint32(e.Errno))
	b = le.AppendUint16(b, uint16(len(e.Text)))
	return append(b, e.Text...)
}
func decodeError(b []byte) (Message, error) {
	n := int(le.Uint16(b[4:]))
	if n > MaxText {
		return nil, ErrText
	}
	if ErrorSize+n != len(b) {
		return nil, ErrBodyLength
	}
	return &ErrorReply{syscall.Errno(le.Uint32(b)), string(b[ErrorSize:])}, nil
}
