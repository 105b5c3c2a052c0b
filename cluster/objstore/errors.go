package objstore

import "errors"

// The sentinel errors, each with when it is returned. The first three are
// also what a bad configuration is, one line each, for `dnnfs mount` to
// print before it exits non-zero; operations wrap them too (an S3 server
// that went away returns ErrUnreachable).
var (
	// ErrUnreachable is returned when the endpoint does not answer
	// (refused, no route, DNS, TLS handshake, timeout).
	ErrUnreachable = errors.New("objstore: S3 endpoint unreachable")
	// ErrCredentials is returned when the endpoint refuses the
	// credentials (unknown access key, bad signature, access denied), or
	// none were given.
	ErrCredentials = errors.New("objstore: S3 credentials refused")
	// ErrNoBucket is returned when the bucket does not exist.
	ErrNoBucket = errors.New("objstore: S3 bucket does not exist")
	// ErrNotFound is returned when no object is under the key asked for.
	ErrNotFound = errors.New("objstore: S3 object not found")
	// ErrNoFSID is returned by a chunk or manifest operation on a store
	// opened without an FSID (one opened only to attach a foreign prefix).
	ErrNoFSID = errors.New("objstore: store opened without an fsid")
	// ErrShort is returned when an object or range is shorter than asked
	// for.
	ErrShort = errors.New("objstore: S3 object shorter than the range asked for")
	// ErrBadCRC is returned by ParseCRC32C (and JSON decoding) for a
	// CRC-32C that is not 8 hex digits.
	ErrBadCRC = errors.New("objstore: crc32c is not 8 hex digits")
	// ErrBadManifest is returned for a manifest that does not decode, or
	// whose fields disagree (chunk count or sizes against size and
	// chunk_size, ids, another fsid).
	ErrBadManifest = errors.New("objstore: bad manifest")
)
