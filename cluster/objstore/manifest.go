package objstore

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Manifest commits one version of a file: its size, chunk size and every
// chunk's object and checksum (the package doc has the JSON table).
type Manifest struct {
	FSID      FSID         `json:"fsid"`
	ID        FileID       `json:"id"`
	Version   Version      `json:"version"`
	Size      int64        `json:"size"`
	ChunkSize int64        `json:"chunk_size"`
	Chunks    []ChunkEntry `json:"chunks"`
}

// ChunkEntry is one chunk of a manifest.
type ChunkEntry struct {
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	CRC32C CRC32C `json:"crc32c"`
}

// Chunks returns how many chunks a file of size bytes has.
func Chunks(size, chunkSize int64) int64 {
	if size <= 0 {
		return 0
	}
	n := size / chunkSize
	if size%chunkSize != 0 {
		n++ // the short last chunk (no size+chunkSize-1: it would overflow near 8 EiB)
	}
	return n
}

// Validate checks the manifest is whole and consistent: ids well formed,
// version 1 up, one entry per chunk, every chunk chunk_size long but the
// last, which ends at size.
func (m *Manifest) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadManifest, fmt.Sprintf(format, a...))
	}
	if err := m.FSID.Valid(); err != nil {
		return bad("fsid %q: %v", m.FSID, err)
	}
	if err := m.ID.Valid(); err != nil {
		return bad("id %q: %v", m.ID, err)
	}
	if m.Version == 0 {
		return bad("version 0")
	}
	if m.Size < 0 || m.ChunkSize <= 0 {
		return bad("size %d, chunk_size %d", m.Size, m.ChunkSize)
	}
	if n := Chunks(m.Size, m.ChunkSize); int64(len(m.Chunks)) != n {
		return bad("%d chunks for size %d and chunk_size %d (want %d)", len(m.Chunks), m.Size, m.ChunkSize, n)
	}
	for i, c := range m.Chunks {
		want := m.ChunkSize
		if i == len(m.Chunks)-1 {
			want = m.Size - int64(i)*m.ChunkSize
		}
		if c.Size != want {
			return bad("chunk %d is %d bytes, want %d", i, c.Size, want)
		}
		if c.Key == "" {
			return bad("chunk %d has no key", i)
		}
	}
	return nil
}

// EncodeManifest validates m and returns its JSON.
func EncodeManifest(m *Manifest) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// DecodeManifest reads a manifest's JSON (unknown fields are an error: a
// manifest from a newer format must not be half understood) and validates
// it.
func DecodeManifest(b []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data", ErrBadManifest)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}
