package ids

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// NodeID names one dnnfs daemon in the cluster (--node-id): 1 to 64 of
// [a-z0-9._-], not "." or "..". It is a component of etcd keys, so no '/'.
type NodeID string

// FSID is the cluster's identity: 32 lower-case hex digits, created once by
// the first node (the S3 keys start with it).
type FSID string

// FileID is a file's identity across the cluster: 32 lower-case hex digits
// (128 random bits, or for an attached object a hash of bucket, key and
// etag), assigned when its path is first committed; a rename keeps it.
type FileID string

// Version numbers a file's committed contents: 1 for the first commit,
// bumped by each commit after it.
type Version uint64

// ChunkIdx numbers a chunk of one version of a file (offset / chunk size),
// from 0.
type ChunkIdx uint32

// ChunkRef names one chunk of one version of a file.
type ChunkRef struct {
	File FileID
	Ver  Version
	Idx  ChunkIdx
}

// String is the chunk's name in the peer protocol and in rendezvous
// hashing: "<id>/<ver>/<chunk>".
func (r ChunkRef) String() string {
	return fmt.Sprintf("%s/%d/%d", r.File, r.Ver, r.Idx)
}

// FileVersion names one version of a file.
type FileVersion struct {
	File FileID
	Ver  Version
}

// Valid reports whether n is a well-formed node id.
func (n NodeID) Valid() error {
	ok := len(n) > 0 && len(n) <= 64 && n != "." && n != ".."
	for i := 0; ok && i < len(n); i++ {
		c := n[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: node id %q: 1 to 64 characters of [a-z0-9._-], not . or ..", ErrInvalid, string(n))
	}
	return nil
}

// ParseNodeID checks s is a NodeID.
func ParseNodeID(s string) (NodeID, error) {
	n := NodeID(s)
	return n, n.Valid()
}

// Valid reports whether id is 32 lower-case hex digits.
func (id FileID) Valid() error {
	if !isHex32(string(id)) {
		return fmt.Errorf("%w: file id %q: 32 lower-case hex digits", ErrInvalid, string(id))
	}
	return nil
}

// ParseFileID checks s is a FileID.
func ParseFileID(s string) (FileID, error) {
	id := FileID(s)
	return id, id.Valid()
}

// Valid reports whether f is 32 lower-case hex digits.
func (f FSID) Valid() error {
	if !isHex32(string(f)) {
		return fmt.Errorf("%w: fsid %q: 32 lower-case hex digits", ErrInvalid, string(f))
	}
	return nil
}

// ParseFSID checks s is an FSID.
func ParseFSID(s string) (FSID, error) {
	f := FSID(s)
	return f, f.Valid()
}

// NewFileID returns a fresh random file id.
func NewFileID() FileID { return FileID(randomHex()) }

// NewFSID returns a fresh random cluster id.
func NewFSID() FSID { return FSID(randomHex()) }

func randomHex() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("ids: crypto/rand: " + err.Error()) // never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

func isHex32(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
