package cluster

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/dnnfs/dnnfs/core"
)

// testData is size bytes, none zero (a hole shows), different per seed.
func testData(size int, seed byte) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7+int(seed)*31+i/testCS) | 1
	}
	return b
}

// lookup makes the placeholder of a name committed elsewhere.
func lookup(t *testing.T, n *Node, name string) *core.Inode {
	t.Helper()
	in, err := n.Lookup(context.Background(), n.p.Root(), name)
	if err != nil {
		t.Fatalf("lookup %s: %v", name, err)
	}
	return in
}

// sharedFile makes name a file committed (data, version 1) and served by
// node b, and returns node a with its placeholder.
func sharedFile(t *testing.T, name string, data []byte) (*world, *Node, *core.Inode) {
	t.Helper()
	w := newWorld()
	serveObjects(t, w, "b")
	w.commitAs("b", name, data)
	n := testNode(t, w, "a")
	return w, n, lookup(t, n, name)
}

// readAll fills and reads the whole pool file, as fs's read does.
func readAll(t *testing.T, n *Node, in *core.Inode) []byte {
	t.Helper()
	size := int64(in.Attr().Size)
	if err := n.Fill(context.Background(), in, 0, size); err != nil {
		t.Fatalf("fill: %v", err)
	}
	b := make([]byte, size)
	if k, err := n.p.ReadAt(in, b, 0); err != nil || int64(k) != size {
		t.Fatalf("read %d of %d bytes: %v", k, size, err)
	}
	return b
}

// TestOpenWritersRevalidate: two writers opening at once on a node whose
// copy is of an old version (the file watch has not told it yet) still
// bring the committed version in first: the first writer's check of the
// version must not depend on whether the second has counted itself yet
// (DESIGN §Cluster, "Close-to-open"). Else both write on the old version
// and every commit of theirs conflicts.
func TestOpenWritersRevalidate(t *testing.T) {
	w, n, in := sharedFile(t, "f", testData(3*testCS, 1))
	_, _, _ = w.commitAs("b", "f", testData(2*testCS+5, 2)) // v2, not watched by a
	ctx := context.Background()
	var second *Handle
	testHookWriterOpened = func() {
		testHookWriterOpened = nil
		var err error
		if second, err = n.Open(ctx, in, true, false); err != nil {
			t.Errorf("second writer: %v", err)
		}
	}
	t.Cleanup(func() { testHookWriterOpened = nil })
	first, err := n.Open(ctx, in, true, false)
	if err != nil {
		t.Fatalf("first writer: %v", err)
	}
	f := first.f
	f.mu.Lock()
	ver := f.ver
	f.mu.Unlock()
	got := make([]byte, in.Attr().Size)
	n.p.ReadAt(in, got, 0)
	n.Release(second)
	n.Release(first)
	if ver != 2 || !bytes.Equal(got, testData(2*testCS+5, 2)) {
		t.Fatalf("writers opened on version %d (%d bytes), want the committed version 2", ver, len(got))
	}
}

// TestTruncateWhileWriterCloses: a truncate(2) of a committed file that a
// handle here writes is left to that writer's commit; when the writer's
// last close comes between the truncate's look at the writers and the
// pool's truncate, the truncate commits itself, so other nodes see the new
// size (DESIGN §Cluster, "Writing", truncate(2)) instead of a change no
// writer will commit.
func TestTruncateWhileWriterCloses(t *testing.T) {
	w, n, in := sharedFile(t, "t", testData(2*testCS, 15))
	ctx := context.Background()
	h, err := n.Open(ctx, in, true, false)
	if err != nil {
		t.Fatal(err)
	}
	const size = testCS / 2
	err = n.Truncate(ctx, in, size, func() error {
		n.Release(h) // the writer's close, racing in
		sz := uint64(size)
		return n.p.Setattr(in, core.SetAttr{Size: &sz})
	})
	if err != nil {
		t.Fatalf("truncate: %v", err)
	}
	rec, _, err := n.ns.File(ctx, h.f.id)
	if err != nil || rec.Size != size {
		t.Fatalf("the committed record after the truncate: size %d (%v), want %d (calls %q)", rec.Size, err, size, w.callLog())
	}
}

// TestChmodByWriter: a chmod of a file this node writes travels with the
// writer's commit (DESIGN §Cluster, "Writing": "A writer's own chmod
// travels with its commit"), even when the writer changed nothing else,
// and when it comes during the last writer's close, after that commit read
// the attributes (the close commits once more before the lock goes).
func TestChmodByWriter(t *testing.T) {
	for _, during := range []bool{false, true} {
		t.Run(fmt.Sprintf("DuringRelease=%v", during), func(t *testing.T) {
			w, n, in := sharedFile(t, "m", testData(testCS, 16))
			ctx := context.Background()
			h, err := n.Open(ctx, in, true, false)
			if err != nil {
				t.Fatal(err)
			}
			mode := uint32(0o600)
			chmod := func() {
				if err := n.p.Setattr(in, core.SetAttr{Mode: &mode}); err != nil {
					t.Error(err)
				}
				if err := n.MetaChanged(ctx, in); err != nil {
					t.Errorf("chmod: %v", err)
				}
			}
			if during {
				if _, err := n.p.Write(in, 0, []byte("changed"), false); err != nil {
					t.Fatal(err)
				}
				n.Wrote(in, 0, 7)
				var once sync.Once
				w.set(func(w *world) { w.onCommit = func(string) { once.Do(chmod) } })
			} else {
				chmod()
			}
			n.Release(h)
			rec, _, err := n.ns.File(ctx, h.f.id)
			if err != nil || rec.Mode&0o777 != mode {
				t.Fatalf("the committed record after the writer's close: mode %#o (%v), want %#o (calls %q)", rec.Mode&0o777, err, mode, w.callLog())
			}
		})
	}
}
