package wire

import "errors"

// The decoder's and encoder's refusals, one per rule of the format (see
// the package doc). Each is returned as is, never wrapped, so a server can
// log it and answer with an error reply, and a test can compare it.
var (
	// ErrShort: fewer bytes than a header (HeaderSize), or than the
	// header's body length, were given to a decoder.
	ErrShort = errors.New("wire: short frame")
	// ErrMagic: the header does not begin with Magic ("DNNW"); the peer
	// does not speak this protocol, or the stream lost its framing.
	ErrMagic = errors.New("wire: bad magic")
	// ErrVersion: a header's version, or a HelloReply's chosen version,
	// is not one this package speaks (MinVersion..MaxVersion).
	ErrVersion = errors.New("wire: unknown protocol version")
	// ErrVersionRange: a Hello whose min version is 0 or above its max.
	ErrVersionRange = errors.New("wire: bad version range")
	// ErrType: a header's type is none of the Type constants.
	ErrType = errors.New("wire: unknown message type")
	// ErrTooLarge: a header's body length is above MaxBody (returned
	// before the body is read), or an encoding would be.
	ErrTooLarge = errors.New("wire: body too large")
	// ErrBodyLength: a body length that disagrees with what its type
	// needs (a fixed size, a Grant's 24+32n, an ErrorReply's 6+text).
	ErrBodyLength = errors.New("wire: body length does not fit the message type")
	// ErrExtentCount: a Grant's extent count disagrees with its body
	// length (or, encoding, is above MaxExtents).
	ErrExtentCount = errors.New("wire: extent count does not fit the body")
	// ErrTrailing: bytes after the one frame Decode was given.
	ErrTrailing = errors.New("wire: trailing bytes after the frame")
	// ErrZeroLength: a Lease or an Extent of length 0.
	ErrZeroLength = errors.New("wire: zero length")
	// ErrOverflow: offset+length of a Lease or an Extent (file or pool
	// side) beyond MaxOffset, the largest file offset (2^63-1).
	ErrOverflow = errors.New("wire: offset plus length overflows")
	// ErrMode: a Lease mode other than ModeRead and ModeWrite.
	ErrMode = errors.New("wire: unknown lease mode")
	// ErrFlags: a flags field with a bit this version does not define, or
	// a flag its message forbids (LeaseExtend on a read lease).
	ErrFlags = errors.New("wire: unknown or contradictory flags")
	// ErrReserved: a reserved field that is not zero.
	ErrReserved = errors.New("wire: reserved field not zero")
	// ErrNoLease: lease id 0, which no grant ever carries.
	ErrNoLease = errors.New("wire: lease id 0")
	// ErrExtentOrder: a Grant's extents not in increasing file order, or
	// overlapping in the file.
	ErrExtentOrder = errors.New("wire: extents out of order or overlapping")
	// ErrBlockSize: a HelloReply's block size that is not a power of two.
	ErrBlockSize = errors.New("wire: block size not a power of two")
	// ErrErrno: an ErrorReply with errno 0.
	ErrErrno = errors.New("wire: error reply with errno 0")
	// ErrText: an ErrorReply's text longer than MaxText or not UTF-8.
	ErrText = errors.New("wire: bad error text")
)
