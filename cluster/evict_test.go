package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pooltest"
	"github.com/dnnfs/dnnfs/tests/clusterenv"
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

// evictNode is a Node with only what eviction uses: a real pool (core on
// a memory medium) and a real namespace (a one-member etcd).
func evictNode(t *testing.T) *Node {
	t.Helper()
	e := clusterenv.StartEtcd(t, 1)
	ns, err := namespace.Open(context.Background(), namespace.Config{Endpoints: e.Endpoints(), Node: "evict",
		PeerURL: "http://127.0.0.1:1/evict", ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	p, _ := pooltest.MustOpen(t, pooltest.Options{Size: 32 << 20})
	return &Node{log: zap.NewNop(), ns: ns, p: p, files: map[core.Ino]*file{}, byID: map[namespace.FileID]*file{},
		ev: newEvictor(), cache: newMemCache(1 << 20)}
}

// evictFile makes a committed cluster file of n chunks of 1 MiB (the last
// one short), all present, and returns it with its bytes.
func evictFile(t *testing.T, n *Node, name string, chunks int) (*file, []byte) {
	t.Helper()
	const cs = 1 << 20
	in, err := n.p.Create(n.p.Root(), name, core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, chunks*cs-100)
	for i := range data {
		data[i] = byte(i*7+i/cs) | 1 // never zero: a punched byte shows
	}
	if _, err := n.p.Write(in, 0, data, false); err != nil {
		t.Fatal(err)
	}
	f := &file{in: in, id: namespace.NewFileID(), ver: 1, cs: cs, crc: map[namespace.ChunkIdx]objstore.CRC32C{},
		present: namespace.ChunkRange(0, namespace.ChunkIdx(chunks)), mtime: in.Attr().Mtime.UnixNano()}
	n.mu.Lock()
	n.files[in.Ino], n.byID[f.id] = f, f
	n.mu.Unlock()
	f.mu.Lock()
	if err := n.saveLocked(f); err != nil {
		t.Fatal(err)
	}
	f.mu.Unlock()
	n.ns.AddHolding(f.id, f.ver, f.present.Slice()...)
	return f, data
}

// checkEvicted: f's present chunks (in memory, in its xattr and in the
// node's holdings) are want; present chunks read back as written, absent
// ones as zeros (punched), and the size and mtime are the committed ones.
func checkEvicted(t *testing.T, n *Node, f *file, data []byte, want string) {
	t.Helper()
	f.mu.Lock()
	got := f.present.String()
	f.mu.Unlock()
	b, err := n.p.Getxattr(f.in, XattrState)
	var st stateJSON
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("state xattr: %v %s", err, b)
	}
	held := n.ns.Held()[namespace.FileVersion{File: f.id, Ver: f.ver}]
	if got != want || st.Chunks != want || held.String() != want {
		t.Fatalf("present chunks %q, xattr %q, holdings %q; want %q", got, st.Chunks, held.String(), want)
	}
	a := f.in.Attr()
	if a.Size != uint64(len(data)) || a.Mtime.UnixNano() != f.mtime {
		t.Fatalf("size %d mtime %d after eviction; want %d and %d", a.Size, a.Mtime.UnixNano(), len(data), f.mtime)
	}
	pool := make([]byte, len(data))
	if k, err := n.p.ReadAt(f.in, pool, 0); err != nil || k != len(data) {
		t.Fatalf("read back: %d %v", k, err)
	}
	for i := 0; int64(i)*f.cs < int64(len(data)); i++ {
		lo, hi := int64(i)*f.cs, min(int64(i+1)*f.cs, int64(len(data)))
		if st.Chunks != "" && strings.Contains(","+expand(want)+",", fmt.Sprintf(",%d,", i)) {
			if !bytes.Equal(pool[lo:hi], data[lo:hi]) {
				t.Fatalf("present chunk %d changed", i)
			}
		} else if !bytes.Equal(pool[lo:hi], make([]byte, hi-lo)) {
			t.Fatalf("evicted chunk %d still has bytes", i)
		}
	}
}

func expand(s string) string {
	c, _ := namespace.ParseChunks(s)
	var out []string
	for _, i := range c.Slice() {
		out = append(out, fmt.Sprint(i))
	}
	return strings.Join(out, ",")
}

// TestEvictOrderPinsAndState: a pass evicts the least recently read
// chunks first, just enough of them, never a pinned chunk nor one of a
// file with a writer; the state, the holdings and the bytes agree after.
func TestEvictOrderPinsAndState(t *testing.T) {
	n := evictNode(t)
	f, data := evictFile(t, n, "f", 6)
	for i := 0; i < 6; i++ {
		n.used(f, namespace.ChunkIdx(i))
	}
	unpin := n.Pin(f.in, 100, 10) // chunk 0: in use by a read, and read last
	n.used(f, 4)                  // read after: newer than 0 and 5

	// Room for two chunks more than there is: chunks 1 and 2 go (0 is
	// pinned, 3 the next oldest stays).
	n.ev.minFree.Store(n.avail() + 2*f.cs - 8192)
	n.makeRoom(0, nil)
	checkEvicted(t, n, f, data, "0,3-5")
	if s := n.ev.stats(); s.Chunks != 2 || s.Bytes != 2*f.cs || s.Passes != 1 {
		t.Fatalf("stats %+v: want 2 chunks of 1 MiB in one pass", s)
	}

	// A file with a writer open here keeps its chunks (not in the LRU:
	// adopted first, then refused).
	g, gdata := evictFile(t, n, "g", 2)
	g.mu.Lock()
	g.writers = 1
	g.mu.Unlock()
	n.ev.minFree.Store(1 << 40) // everything that may go
	n.makeRoom(0, nil)
	checkEvicted(t, n, f, data, "0")
	checkEvicted(t, n, g, gdata, "0-1")

	unpin()
	g.mu.Lock()
	g.writers = 0
	g.mu.Unlock()
	n.makeRoom(0, nil)
	checkEvicted(t, n, f, data, "")
	checkEvicted(t, n, g, gdata, "")
	if s := n.ev.stats(); s.Chunks != 8 || s.Failed != 0 {
		t.Fatalf("stats %+v: want 8 chunks evicted in all", s)
	}
}
