package cluster

import (
	"testing"

	"github.com/dnnfs/dnnfs/cluster/namespace"
)

// TestChunkLRUOrder: the oldest chunk is the least recently read one that
// no read pins; chunks adopted (present but never read since the mount)
// come before every chunk read, in the order given.
func TestChunkLRUOrder(t *testing.T) {
	c := newChunkLRU()
	f, g := &file{}, &file{}
	k := func(x *file, i int) chunkKey { return chunkKey{x, namespace.ChunkIdx(i)} }
	c.touch(k(f, 0))
	c.touch(k(f, 1))
	c.touch(k(g, 0))
	c.touch(k(f, 0)) // read again: now the newest
	want := func(skip map[chunkKey]bool, w chunkKey) {
		t.Helper()
		got, ok := c.oldest(skip)
		if !ok || got != w {
			t.Fatalf("oldest = %v %v, want %v", got, ok, w)
		}
	}
	want(nil, k(f, 1))
	want(map[chunkKey]bool{k(f, 1): true}, k(g, 0))

	// A pinned chunk is never the one chosen, however old.
	c.pin([]chunkKey{k(f, 1), k(f, 1)})
	want(nil, k(g, 0))
	c.unpin([]chunkKey{k(f, 1)})
	if !c.pinned(k(f, 1)) {
		t.Fatal("chunk unpinned after one of its two pins ended")
	}
	c.unpin([]chunkKey{k(f, 1)})
	if c.pinned(k(f, 1)) {
		t.Fatal("chunk still pinned after both pins ended")
	}
	// The pin counted as a read: f/1 is the newest now.
	want(nil, k(g, 0))

	// Adopted chunks go first, in the given order; known ones keep their place.
	c.adoptOld([]chunkKey{k(g, 5), k(g, 3), k(f, 1)})
	want(nil, k(g, 5))
	want(map[chunkKey]bool{k(g, 5): true}, k(g, 3))
	want(map[chunkKey]bool{k(g, 5): true, k(g, 3): true}, k(g, 0))
	if c.len() != 5 {
		t.Fatalf("%d chunks ordered, want 5", c.len())
	}

	c.remove(k(g, 5))
	c.remove(k(g, 3))
	c.remove(k(g, 0))
	c.remove(k(g, 0)) // twice: nothing
	want(nil, k(f, 0))
	c.pin([]chunkKey{k(f, 0), k(f, 1)})
	if got, ok := c.oldest(nil); ok {
		t.Fatalf("oldest = %v with every chunk pinned", got)
	}
}
