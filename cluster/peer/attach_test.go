package peer_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"sync"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/cluster/peer"
	"github.com/minio/minio-go/v7"
)

// TestAttachedObjects: objects another client put into the bucket are
// attached on two nodes, read byte-exact by both at once, with one S3 GET
// per chunk.
func TestAttachedObjects(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r := rand.New(rand.NewSource(10))
	objs := map[string][]byte{
		"datasets/ckpt/a.bin":     make([]byte, 5*chunkSize-123),
		"datasets/ckpt/b.bin":     make([]byte, 1000),
		"datasets/ckpt/sub/c.bin": make([]byte, 2*chunkSize),
	}
	for k, v := range objs {
		r.Read(v)
		if _, err := e.s3.Client().PutObject(ctx, e.s3.Bucket, k, bytes.NewReader(v), int64(len(v)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type chunk struct {
		ref  objstore.ChunkRef
		want []byte
	}
	var mu sync.Mutex
	var chunks []chunk // from the first node's listing
	attach := func(st *objstore.Store) peer.Catalog {
		ac := peer.NewAttachCatalog()
		list, err := st.ListForeign(ctx, "datasets/ckpt/")
		if err != nil || len(list) != 3 {
			t.Fatalf("ListForeign: %v, %v", list, err)
		}
		mu.Lock()
		defer mu.Unlock()
		first := chunks == nil
		for _, o := range list {
			id := ac.Add(st, o, chunkSize)
			for off := int64(0); first && off < o.Size; off += chunkSize {
				chunks = append(chunks, chunk{
					objstore.ChunkRef{File: id, Ver: 1, Idx: objstore.ChunkIdx(off / chunkSize)},
					objs[o.Key][off:min(off+chunkSize, o.Size)],
				})
			}
		}
		return peer.Chain{ac, peer.NewManifestCatalog(st)}
	}
	a := e.addNode("a", nodeOpts{catalog: attach})
	b := e.addNode("b", nodeOpts{catalog: attach})
	if len(chunks) != 8 {
		t.Fatalf("%d chunks", len(chunks))
	}
	var wg sync.WaitGroup
	for _, n := range []*node{a, b} {
		for _, c := range chunks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, src, err := n.peer.Fetch(ctx, c.ref)
				if err != nil || !bytes.Equal(got, c.want) {
					t.Errorf("%s: %s from %s: %d bytes, %v", n.id, c.ref, src, len(got), err)
				}
			}()
		}
	}
	wg.Wait()
	if got := chunkGets(a, b); got != 8 {
		t.Errorf("S3 chunk GETs: %d, want exactly 8 (one per chunk)", got)
	}
	if m := a.store.Stats().ManifestGets + b.store.Stats().ManifestGets; m != 0 {
		t.Errorf("%d manifest GETs for attached objects", m)
	}
	// Past the object's end, and a version other than 1: no such chunk,
	// told at once (no request to a peer or S3).
	last := chunks[len(chunks)-1].ref
	before := a.peer.Stats()
	for _, ref := range []objstore.ChunkRef{{File: last.File, Ver: 1, Idx: 99}, {File: last.File, Ver: 2, Idx: 0}} {
		if _, _, err := a.peer.Fetch(ctx, ref); !errors.Is(err, peer.ErrNoChunk) {
			t.Errorf("Fetch %s: %v, want ErrNoChunk", ref, err)
		}
	}
	if s := a.peer.Stats(); s.Peer.Requests+s.Home.Requests+s.S3.Requests != before.Peer.Requests+before.Home.Requests+before.S3.Requests {
		t.Errorf("requests sent for chunks that do not exist: %+v, before %+v", s, before)
	}
}
