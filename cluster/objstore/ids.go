package objstore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"

	"github.com/dnnfs/dnnfs/cluster/ids"
)

// The cluster's identities are cluster/ids'; these names keep this
// package's API whole.
type (
	FSID     = ids.FSID
	FileID   = ids.FileID
	Version  = ids.Version
	ChunkIdx = ids.ChunkIdx
	ChunkRef = ids.ChunkRef
)

// ForeignFileID is the FileID of an attached foreign object (dnnfs
// attach): the first 128 bits of sha256("<bucket>/<key>/<etag>"), in hex,
// so every node names the same object the same, and a rewritten object
// (a new etag) is a new file, never a mix of old and new chunks.
func ForeignFileID(bucket, key, etag string) FileID {
	sum := sha256.Sum256([]byte(bucket + "/" + key + "/" + etag))
	return FileID(hex.EncodeToString(sum[:16]))
}

// ErrBadID: an FSID or FileID that is not 32 lower-case hex digits
// (ids.ErrInvalid).
var ErrBadID = ids.ErrInvalid

// ParseFileID checks s is a FileID (ids.ParseFileID).
func ParseFileID(s string) (FileID, error) { return ids.ParseFileID(s) }

// ParseFSID checks s is an FSID (ids.ParseFSID).
func ParseFSID(s string) (FSID, error) { return ids.ParseFSID(s) }

// CRC32C is a chunk's CRC-32C (Castagnoli), as in manifests and in the
// peer protocol's X-Dnnfs-Crc32c header: 8 lower-case hex digits.
type CRC32C uint32

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C of b.
func Checksum(b []byte) CRC32C { return CRC32C(crc32.Checksum(b, castagnoli)) }

// String is the 8-hex-digit form.
func (c CRC32C) String() string { return fmt.Sprintf("%08x", uint32(c)) }

// ParseCRC32C reads the 8-hex-digit form.
func ParseCRC32C(s string) (CRC32C, error) {
	if len(s) != 8 {
		return 0, fmt.Errorf("%q: %w", s, ErrBadCRC)
	}
	v, err := strconv.ParseUint(s, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, ErrBadCRC)
	}
	return CRC32C(v), nil
}

// MarshalJSON writes the 8-hex-digit string.
func (c CRC32C) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

// UnmarshalJSON reads the 8-hex-digit string.
func (c *CRC32C) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseCRC32C(s)
	if err != nil {
		return err
	}
	*c = v
	return nil
}
