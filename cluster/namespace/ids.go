package namespace

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
)

// NodeID names one dnnfs daemon in the cluster (--node-id): 1 to 64 of
// [a-z0-9._-]. It is a key component, so no '/' may appear in it.
type NodeID string

// FileID is a file's identity across the cluster: 32 lowercase hex digits
// (128 random bits), assigned when its path is first committed; a rename
// keeps it.
type FileID string

// FSID is the cluster's identity: 32 lowercase hex digits, created once by
// the first node (the S3 keys start with it).
type FSID string

// Version numbers a file's committed contents: 1 for the first commit,
// bumped by each commit after it.
type Version uint64

// ChunkIdx numbers a chunk of one version of a file, from 0.
type ChunkIdx uint32

// ChunkRef names one chunk of one version of a file.
type ChunkRef struct {
	File FileID
	Ver  Version
	Idx  ChunkIdx
}

// FileVersion names one version of a file.
type FileVersion struct {
	File FileID
	Ver  Version
}

// Valid reports whether n is a well-formed node id.
func (n NodeID) Valid() error {
	if len(n) == 0 || len(n) > 64 {
		return fmt.Errorf("%w: node id %q: 1 to 64 characters of [a-z0-9._-]", ErrInvalid, string(n))
	}
	for _, c := range []byte(n) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: node id %q: 1 to 64 characters of [a-z0-9._-]", ErrInvalid, string(n))
		}
	}
	if n == "." || n == ".." {
		return fmt.Errorf("%w: node id %q", ErrInvalid, string(n))
	}
	return nil
}

// NewFileID returns a fresh random file id.
func NewFileID() FileID { return FileID(randomHex()) }

// NewFSID returns a fresh random cluster id.
func NewFSID() FSID { return FSID(randomHex()) }

func randomHex() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("namespace: crypto/rand: " + err.Error()) // never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// Valid reports whether id is 32 lowercase hex digits.
func (id FileID) Valid() error {
	if !isHex32(string(id)) {
		return fmt.Errorf("%w: file id %q: 32 lowercase hex digits", ErrInvalid, string(id))
	}
	return nil
}

// Valid reports whether f is 32 lowercase hex digits.
func (f FSID) Valid() error {
	if !isHex32(string(f)) {
		return fmt.Errorf("%w: fsid %q: 32 lowercase hex digits", ErrInvalid, string(f))
	}
	return nil
}

func isHex32(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// CleanPath checks a namespace path: relative to the mount root,
// '/'-separated, no leading or trailing '/', no empty, "." or ".."
// component, no NUL. The root itself is "" and names no file.
func CleanPath(p string) error {
	if p == "" {
		return fmt.Errorf("%w: empty path", ErrInvalid)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%w: path %q has a NUL", ErrInvalid, p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("%w: path %q: components must be non-empty and not . or ..", ErrInvalid, p)
		}
	}
	return nil
}
