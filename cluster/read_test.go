package cluster

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/objstore"
)

// TestFillVersionMovesDuringRead: a read whose file moves on to a newer
// version while its chunks are being fetched (another open on this node
// revalidated it) fills the newer version's chunks and reads them, instead
// of failing with ErrCluster for a chunk of the old one (DESIGN §Cluster,
// "Close-to-open": readers that keep a file open across a commit may see
// the new version).
func TestFillVersionMovesDuringRead(t *testing.T) {
	w, n, in := sharedFile(t, "f", testData(3*testCS, 5))
	ctx := context.Background()
	h, err := n.Open(ctx, in, false, false)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Release(h)
	v2 := testData(2*testCS-7, 6)
	var once sync.Once
	w.set(func(w *world) {
		w.onServe = func(ref objstore.ChunkRef) {
			once.Do(func() {
				w.commitAs("b", "f", v2)
				n.revalidate(ctx, h.f) // a second open here, after the commit
			})
		}
	})
	if err := n.Fill(ctx, in, 0, 3*testCS); err != nil {
		t.Fatalf("fill across a new version: %v", err)
	}
	got := make([]byte, in.Attr().Size)
	if k, err := n.p.ReadAt(in, got, 0); err != nil || k != len(got) {
		t.Fatalf("read %d: %v", k, err)
	}
	if !bytes.Equal(got, v2) {
		t.Fatalf("read %d bytes that are not version 2's (%d bytes)", len(got), len(v2))
	}
}
