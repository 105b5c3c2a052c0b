package cluster

import (
	"bytes"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/objstore"
)

// TestMemCacheEvictsOldest: the cache of chunks filled for others keeps
// its bound, evicting the oldest first and reporting them (their holder
// records must shrink).
func TestMemCacheEvictsOldest(t *testing.T) {
	c := newMemCache(10)
	ref := func(i uint32) objstore.ChunkRef {
		return objstore.ChunkRef{File: "0123456789abcdef0123456789abcdef", Ver: 1, Idx: objstore.ChunkIdx(i)}
	}
	if gone := c.put(ref(0), make([]byte, 4), 1); len(gone) != 0 {
		t.Fatalf("evicted %v from an empty cache", gone)
	}
	c.put(ref(1), make([]byte, 4), 2)
	gone := c.put(ref(2), make([]byte, 4), 3)
	if len(gone) != 1 || gone[0] != ref(0) {
		t.Fatalf("evicted %v, want chunk 0", gone)
	}
	if _, ok := c.get(ref(0)); ok {
		t.Fatal("chunk 0 still cached")
	}
	if e, ok := c.get(ref(2)); !ok || e.crc != 3 {
		t.Fatalf("chunk 2: %v %v", e, ok)
	}
	if n, b := c.stats(); n != 2 || b != 8 {
		t.Fatalf("stats %d chunks %d bytes, want 2 and 8", n, b)
	}
	if gone := c.put(ref(3), make([]byte, 11), 4); gone != nil {
		t.Fatal("a chunk larger than the cache evicted others")
	}
	c.drop(ref(1))
	if n, b := c.stats(); n != 1 || b != 4 {
		t.Fatalf("after drop: %d chunks %d bytes", n, b)
	}
}

// TestAttachManifestRoundTrip: an attached object's record names bucket,
// key (colons and all) and etag, and nothing else parses as one.
func TestAttachManifestRoundTrip(t *testing.T) {
	o := objstore.ObjectInfo{Key: "ckpt/step:100/model.pt", Size: 123, ETag: "9b2cf535f27731c974343645a3985328-3"}
	m := attachManifest("datasets", o)
	bucket, got, ok := parseAttachManifest(m, 123)
	if !ok || bucket != "datasets" || got != o {
		t.Fatalf("parse(%q) = %q %+v %v", m, bucket, got, ok)
	}
	for _, bad := range []string{"", "0123/4/manifest", "attach:", "attach:e:b:", "attach:e::k"} {
		if _, _, ok := parseAttachManifest(bad, 1); ok {
			t.Errorf("%q parsed as an attached object", bad)
		}
	}
	if !bytes.HasPrefix([]byte(m), []byte(attachPrefix)) || !isAttached(m) {
		t.Fatal("not recognised as attached")
	}
}
