package format

import (
	"errors"
	"strings"
)

// Sentinel errors of the codecs. A decoder's error names the structure
// first and wraps one of these ("inode: checksum mismatch (stored ...,
// computed ...)"): match them with errors.Is, never by text.
var (
	// ErrBadMagic is returned when the bytes are not a dnnfs superblock
	// (DecodeSuperblock: not a pool, or overwritten) or not an SSD-tier
	// device label (DecodeDevLabel).
	ErrBadMagic = errors.New("format: bad magic: not a dnnfs pool")
	// ErrBadChecksum is returned when a structure's stored CRC does not
	// match its bytes (torn write or media corruption).
	ErrBadChecksum = errors.New("format: checksum mismatch")
	// ErrBadVersion is returned when a superblock or device label was
	// made by an incompatible dnnfs.
	ErrBadVersion = errors.New("format: unsupported format version")
	// ErrCorrupt is returned when a field holds a value that cannot be
	// (out of range, a short buffer, a chain that loops, etc).
	ErrCorrupt = errors.New("format: corrupt structure")
	// ErrBadTx is returned by DecodeTx when the journal's transaction
	// area does not hold the transaction its commit word names, or the
	// transaction is damaged (bad checksum, record out of range). Replay
	// must not apply it.
	ErrBadTx = errors.New("format: journal transaction damaged")
	// ErrNotPool is returned by DecodeSuperblockPair when neither
	// superblock has the dnnfs magic (or the medium is smaller than the
	// superblock pair).
	ErrNotPool = errors.New("format: not a dnnfs pool")
)

// inMessage is a sentinel as a decoder's message shows it: after the
// structure's name, so without the package prefix (a checker shows the
// message as is); errors.Is still finds the sentinel.
type inMessage struct{ sentinel error }

func (e inMessage) Error() string { return strings.TrimPrefix(e.sentinel.Error(), "format: ") }
func (e inMessage) Unwrap() error { return e.sentinel }

// The sentinels as decoders wrap them.
var (
	badMagic    error = inMessage{ErrBadMagic}
	badChecksum error = inMessage{ErrBadChecksum}
	badVersion  error = inMessage{ErrBadVersion}
	corrupt     error = inMessage{ErrCorrupt}
)
