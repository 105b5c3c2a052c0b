package pmem

import (
	"bytes"
	"testing"
)

// The eviction images between two fences: the fenced image plus a subset
// of the lines stored (or flushed) since, with their content at the crash
// point; lines equal to the image are never dirty.
func TestRecorderEvictions(t *testing.T) {
	r := NewTrackingRecorder(bytes.Repeat([]byte{'.'}, 16*CacheLine))
	b := r.Bytes()
	copy(b[0:], "A")
	r.Persist(0, 1) // fence 1
	copy(b[2*CacheLine:], "stored")
	copy(b[4*CacheLine:], "flushed")
	r.Flush(4*CacheLine, 1)
	copy(b[6*CacheLine:], ".") // the same byte: not dirty
	copy(b[8*CacheLine:], "x")
	copy(b[8*CacheLine:], "y") // only the last content is seen
	r.Fence()                  // fence 2: line 4 durable
	copy(b[10*CacheLine:], "after the last fence")

	c := r.Crashes(0, 1)
	defer c.Close()
	want := []struct {
		dirty int
		lines map[int64]string
	}{
		{1, map[int64]string{0: "A"}},
		{3, map[int64]string{2 * CacheLine: "stored", 4 * CacheLine: "flushed", 8 * CacheLine: "y"}},
		{3, map[int64]string{2 * CacheLine: "stored", 8 * CacheLine: "y", 10 * CacheLine: "after the last fence"}},
	}
	for k, w := range want {
		if k > 0 && !c.Next() {
			t.Fatalf("the walk ended at fence %d", k-1)
		}
		if c.Fence() != k || !bytes.Equal(c.Image(), r.Image(k)) {
			t.Fatalf("at fence %d the walk's image is not Image(%d)", c.Fence(), k)
		}
		if c.Dirty() != w.dirty {
			t.Errorf("fence %d: %d dirty lines, want %d", k, c.Dirty(), w.dirty)
		}
		seen := map[int64]bool{}
		for j := 0; j < 32; j++ {
			img, release := c.EvictedImage(j)
			evicted := map[int64]bool{}
			for _, l := range c.Evicted(j) {
				evicted[l.Off] = true
				s, ok := w.lines[l.Off]
				if !ok || !bytes.HasPrefix(l.Data, []byte(s)) || !bytes.HasPrefix(img[l.Off:], []byte(s)) {
					t.Fatalf("fence %d subset %d: line %d evicted as %q", k, j, l.Off, l.Data)
				}
				seen[l.Off] = true
			}
			for off := int64(0); off < r.Size(); off += CacheLine {
				if !evicted[off] && !bytes.Equal(img[off:off+CacheLine], c.Image()[off:off+CacheLine]) {
					t.Fatalf("fence %d subset %d: line %d differs from the fenced image", k, j, off)
				}
			}
			release()
		}
		if len(seen) != w.dirty {
			t.Errorf("fence %d: 32 subsets evicted %d of the %d dirty lines", k, len(seen), w.dirty)
		}
	}
	if c.Next() {
		t.Fatal("the walk goes past the last fence")
	}
	// The subsets depend only on the seed, k and j; a walk from the middle
	// sees the same.
	c2 := r.Crashes(1, 1)
	defer c2.Close()
	c3 := r.Crashes(0, 1)
	defer c3.Close()
	c3.Next()
	for j := 0; j < 8; j++ {
		a, ra := c2.EvictedImage(j)
		b, rb := c3.EvictedImage(j)
		if !bytes.Equal(a, b) {
			t.Fatalf("subset %d of fence 1 differs between two walks", j)
		}
		ra()
		rb()
	}
}
