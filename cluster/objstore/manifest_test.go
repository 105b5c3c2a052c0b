package objstore

import (
	"errors"
	"strings"
	"testing"
)

func TestManifestCodec(t *testing.T) {
	m := &Manifest{
		FSID: "0123456789abcdef0123456789abcdef", ID: "fedcba9876543210fedcba9876543210",
		Version: 3, Size: 10, ChunkSize: 4,
		Chunks: []ChunkEntry{
			{Key: "k/0", Size: 4, CRC32C: 0xdeadbeef},
			{Key: "k/1", Size: 4, CRC32C: 1},
			{Key: "k/2", Size: 2, CRC32C: 0},
		},
	}
	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"fsid":"0123456789abcdef0123456789abcdef","id":"fedcba9876543210fedcba9876543210","version":3,"size":10,"chunk_size":4,` +
		`"chunks":[{"key":"k/0","size":4,"crc32c":"deadbeef"},{"key":"k/1","size":4,"crc32c":"00000001"},{"key":"k/2","size":2,"crc32c":"00000000"}]}`
	if string(b) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", b, want)
	}
	got, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Chunks[0].CRC32C != 0xdeadbeef || got.Size != 10 || got.Version != 3 {
		t.Fatalf("decoded %+v", got)
	}
	for name, bad := range map[string]string{
		"unknown field":   strings.Replace(want, `"size":10`, `"size":10,"extra":1`, 1),
		"chunk count":     strings.Replace(want, `"size":10`, `"size":20`, 1),
		"last chunk size": strings.Replace(want, `"size":2,`, `"size":3,`, 1),
		"middle size":     strings.Replace(want, `"key":"k/1","size":4`, `"key":"k/1","size":5`, 1),
		"bad crc":         strings.Replace(want, `"deadbeef"`, `"deadbee"`, 1),
		"crc not hex":     strings.Replace(want, `"deadbeef"`, `"deadbeez"`, 1),
		"bad id":          strings.Replace(want, `"fedcba98`, `"FEDCBA98`, 1),
		"version 0":       strings.Replace(want, `"version":3`, `"version":0`, 1),
		"no key":          strings.Replace(want, `"key":"k/2"`, `"key":""`, 1),
		"trailing":        want + "{}",
		"not json":        "{",
	} {
		if _, err := DecodeManifest([]byte(bad)); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%s: %v", name, err)
		}
	}
	empty := &Manifest{FSID: m.FSID, ID: m.ID, Version: 1, Size: 0, ChunkSize: 4}
	if _, err := EncodeManifest(empty); err != nil {
		t.Errorf("an empty file's manifest: %v", err)
	}
}

func TestChecksum(t *testing.T) {
	// The standard CRC-32C check value.
	if c := Checksum([]byte("123456789")); c != 0xe3069283 || c.String() != "e3069283" {
		t.Fatalf("crc32c(123456789) = %s", c)
	}
	if c, err := ParseCRC32C("e3069283"); err != nil || c != 0xe3069283 {
		t.Fatalf("parse: %v %v", c, err)
	}
	for _, s := range []string{"", "e306928", "e30692830", "+3069283", "xyzxyzxy"} {
		if _, err := ParseCRC32C(s); !errors.Is(err, ErrBadCRC) {
			t.Errorf("ParseCRC32C(%q): %v", s, err)
		}
	}
}

func TestForeignFileID(t *testing.T) {
	id := ForeignFileID("bucket", "datasets/part-0", "9e107d9d372bb6826bd81d3542a419d6")
	// sha256 of "bucket/datasets/part-0/9e107d9d372bb6826bd81d3542a419d6", first 16 bytes.
	if want := FileID("c2803a333af0c3147b122506b64db2e9"); id != want {
		t.Fatalf("ForeignFileID = %s, want %s", id, want)
	}
	if _, err := ParseFileID(string(id)); err != nil {
		t.Fatal(err)
	}
	if ForeignFileID("bucket", "datasets/part-0", "other-etag") == id {
		t.Fatal("a new etag keeps the id")
	}
}

// FuzzDecodeManifest: a manifest that decodes is valid and encodes back to
// one that decodes to the same.
func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(`{"fsid":"0123456789abcdef0123456789abcdef","id":"fedcba9876543210fedcba9876543210","version":3,"size":10,"chunk_size":4,` +
		`"chunks":[{"key":"k/0","size":4,"crc32c":"deadbeef"},{"key":"k/1","size":4,"crc32c":"00000001"},{"key":"k/2","size":2,"crc32c":"00000000"}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("decoded an invalid manifest: %v", err)
		}
		enc, err := EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := DecodeManifest(enc)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v\n%s", err, enc)
		}
		if m2.Size != m.Size || m2.ChunkSize != m.ChunkSize || len(m2.Chunks) != len(m.Chunks) || m2.ID != m.ID || m2.Version != m.Version {
			t.Fatalf("round trip changed the manifest: %+v vs %+v", m, m2)
		}
		for i := range m.Chunks {
			if m.Chunks[i] != m2.Chunks[i] {
				t.Fatalf("chunk %d: %+v vs %+v", i, m.Chunks[i], m2.Chunks[i])
			}
		}
	})
}
