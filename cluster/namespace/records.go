package namespace

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The JSON values of the keys (doc.go has the table); one codec each.

// fsidRecord is the value of <prefix>/fsid.
type fsidRecord struct {
	FSID      FSID  `json:"fsid"`
	ChunkSize int64 `json:"chunk_size"`
}

// NodeInfo is a live node: the value of <prefix>/nodes/<node>.
type NodeInfo struct {
	ID      NodeID `json:"-"`
	Peer    string `json:"peer"`    // the URL its chunk server listens on
	Started int64  `json:"started"` // unix ns when its daemon registered
	PID     int    `json:"pid"`
}

// nameRecord is the value of <prefix>/names/<path>.
type nameRecord struct {
	ID FileID `json:"id"`
}

// FileRecord is a file's committed state: the value of <prefix>/files/<id>.
type FileRecord struct {
	Version   Version `json:"version"`
	Size      int64   `json:"size"`
	ChunkSize int64   `json:"chunk_size"`
	Manifest  string  `json:"manifest"` // the S3 key of this version's manifest
	Mode      uint32  `json:"mode"`
	Mtime     int64   `json:"mtime"` // unix ns
	UID       uint32  `json:"uid"`
	GID       uint32  `json:"gid"`
	// Target is a symbolic link's (Mode's type bits ModeSymlink): its
	// whole content, so the record has no chunks, manifest or objects.
	Target string `json:"target,omitempty"`
}

// Mode type bits of a FileRecord (as st_mode's): a regular file's record
// may carry 0 (records before symbolic links had only permission bits).
const (
	ModeTypeMask uint32 = 0o170000
	ModeRegular  uint32 = 0o100000
	ModeSymlink  uint32 = 0o120000
)

// IsSymlink tells a symbolic link's record.
func (r FileRecord) IsSymlink() bool { return r.Mode&ModeTypeMask == ModeSymlink }

// holderRecord is the value of <prefix>/holders/<id>/<ver>/<node>.
type holderRecord struct {
	Chunks string `json:"chunks"` // Chunks.String()
}

// writerRecord is the value of <prefix>/writers/<id>.
type writerRecord struct {
	Node  NodeID `json:"node"`
	Since int64  `json:"since"` // unix ns
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic("namespace: " + err.Error()) // plain structs always marshal
	}
	return string(b)
}

func decode(key string, val []byte, v any) error {
	if err := json.Unmarshal(val, v); err != nil {
		return fmt.Errorf("%w: etcd key %s: %v", ErrInvalid, key, err)
	}
	return nil
}

func decodeFSID(key string, val []byte) (fsidRecord, error) {
	var r fsidRecord
	if err := decode(key, val, &r); err != nil {
		return r, err
	}
	if err := r.FSID.Valid(); err != nil {
		return r, fmt.Errorf("etcd key %s: %w", key, err)
	}
	if r.ChunkSize <= 0 {
		return r, fmt.Errorf("%w: etcd key %s: chunk_size %d", ErrInvalid, key, r.ChunkSize)
	}
	return r, nil
}

func decodeName(key string, val []byte) (FileID, error) {
	var r nameRecord
	if err := decode(key, val, &r); err != nil {
		return "", err
	}
	if err := r.ID.Valid(); err != nil {
		return "", fmt.Errorf("etcd key %s: %w", key, err)
	}
	return r.ID, nil
}

func decodeFile(key string, val []byte) (FileRecord, error) {
	var r FileRecord
	if err := decode(key, val, &r); err != nil {
		return r, err
	}
	if err := r.check(); err != nil {
		return r, fmt.Errorf("etcd key %s: %w", key, err)
	}
	return r, nil
}

func (r FileRecord) check() error {
	switch t := r.Mode & ModeTypeMask; {
	case t == ModeSymlink:
		if r.Version == 0 || r.Target == "" || r.Size != int64(len(r.Target)) || r.ChunkSize != 0 || r.Manifest != "" {
			return fmt.Errorf("%w: symlink record version %d size %d target %q chunk_size %d manifest %q", ErrInvalid, r.Version, r.Size, r.Target, r.ChunkSize, r.Manifest)
		}
		return nil
	case t != 0 && t != ModeRegular, r.Target != "":
		return fmt.Errorf("%w: file record mode %#o target %q: only regular files and symlinks are shared", ErrInvalid, r.Mode, r.Target)
	}
	if r.Version == 0 || r.Size < 0 || r.ChunkSize <= 0 {
		return fmt.Errorf("%w: file record version %d size %d chunk_size %d", ErrInvalid, r.Version, r.Size, r.ChunkSize)
	}
	return nil
}

// Chunks returns the number of chunks of the version the record names.
func (r FileRecord) Chunks() int64 {
	if r.ChunkSize <= 0 {
		return 0
	}
	return (r.Size + r.ChunkSize - 1) / r.ChunkSize
}

// MtimeTime returns Mtime as a time.
func (r FileRecord) MtimeTime() time.Time { return time.Unix(0, r.Mtime) }

// Chunks is a set of chunk indexes, written in records as sorted ranges
// ("0-3,7"). The zero value is empty.
type Chunks struct {
	s []ChunkIdx // sorted, distinct
}

// NewChunks returns the set of the given indexes.
func NewChunks(idx ...ChunkIdx) Chunks {
	var c Chunks
	c.Add(idx...)
	return c
}

// ChunkRange returns the set {from, ..., to-1}.
func ChunkRange(from, to ChunkIdx) Chunks {
	var c Chunks
	for i := from; i < to; i++ {
		c.s = append(c.s, i)
	}
	return c
}

// Add puts indexes into the set and reports whether any was new.
func (c *Chunks) Add(idx ...ChunkIdx) bool {
	added := false
	for _, i := range idx {
		k := sort.Search(len(c.s), func(j int) bool { return c.s[j] >= i })
		if k < len(c.s) && c.s[k] == i {
			continue
		}
		c.s = append(c.s, 0)
		copy(c.s[k+1:], c.s[k:])
		c.s[k] = i
		added = true
	}
	return added
}

// Remove takes indexes out of the set and reports whether any was in it.
func (c *Chunks) Remove(idx ...ChunkIdx) bool {
	removed := false
	for _, i := range idx {
		k := sort.Search(len(c.s), func(j int) bool { return c.s[j] >= i })
		if k < len(c.s) && c.s[k] == i {
			c.s = append(c.s[:k], c.s[k+1:]...)
			removed = true
		}
	}
	return removed
}

// Union adds every index of o and reports whether any was new.
func (c *Chunks) Union(o Chunks) bool { return c.Add(o.s...) }

// Has reports whether i is in the set.
func (c Chunks) Has(i ChunkIdx) bool {
	k := sort.Search(len(c.s), func(j int) bool { return c.s[j] >= i })
	return k < len(c.s) && c.s[k] == i
}

// Len returns the number of indexes.
func (c Chunks) Len() int { return len(c.s) }

// Slice returns the indexes in ascending order (a copy).
func (c Chunks) Slice() []ChunkIdx { return append([]ChunkIdx(nil), c.s...) }

// Clone returns an independent copy.
func (c Chunks) Clone() Chunks { return Chunks{s: c.Slice()} }

// Equal reports whether both sets hold the same indexes.
func (c Chunks) Equal(o Chunks) bool {
	if len(c.s) != len(o.s) {
		return false
	}
	for i := range c.s {
		if c.s[i] != o.s[i] {
			return false
		}
	}
	return true
}

// String writes the set as ranges: "0-3,7"; "" when empty.
func (c Chunks) String() string {
	var b strings.Builder
	for i := 0; i < len(c.s); {
		j := i
		for j+1 < len(c.s) && c.s[j+1] == c.s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(c.s[i]), 10))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.FormatUint(uint64(c.s[j]), 10))
		}
		i = j + 1
	}
	return b.String()
}

// maxRangeChunks bounds one range of a parsed set, so a corrupt record
// cannot make a reader allocate without limit (2^20 chunks of 16 MiB are
// 16 TiB: more than any one file here).
const maxRangeChunks = 1 << 20

// ParseChunks reads a set written by Chunks.String.
func ParseChunks(s string) (Chunks, error) {
	var c Chunks
	if s == "" {
		return c, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 32)
		if err != nil {
			return Chunks{}, fmt.Errorf("%w: chunk ranges %q", ErrInvalid, s)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 32); err != nil || b < a {
				return Chunks{}, fmt.Errorf("%w: chunk ranges %q", ErrInvalid, s)
			}
		}
		if b-a >= maxRangeChunks || c.Len() > maxRangeChunks {
			return Chunks{}, fmt.Errorf("%w: chunk ranges %q: too many chunks", ErrInvalid, s)
		}
		for i := a; i <= b; i++ {
			c.Add(ChunkIdx(i))
		}
	}
	return c, nil
}
