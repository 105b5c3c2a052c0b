package peer_test

import (
	"context"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/peer"
)

// TestWarm: warming a file from one node has each chunk's home pull it
// from S3 (one GET per chunk, spread over the nodes, no bytes to the
// warming node); a read afterwards on any node makes no S3 request.
func TestWarm(t *testing.T) {
	e := newEnv(t)
	f := e.commit(12, 8)
	nodes := []*node{e.addNode("a", nodeOpts{}), e.addNode("b", nodeOpts{}), e.addNode("c", nodeOpts{})}
	homes := map[peer.NodeID]int{}
	for i := range f.m.Chunks {
		h, err := nodes[0].peer.Warm(context.Background(), f.ref(i))
		if err != nil {
			t.Fatal(err)
		}
		homes[h]++
	}
	if got := chunkGets(nodes...); got != 8 {
		t.Fatalf("warm-up made %d S3 GETs, want 8", got)
	}
	for _, n := range nodes {
		held := 0
		for i := range f.m.Chunks {
			if n.local.has(f.ref(i)) {
				held++
			}
		}
		if held != homes[n.id] {
			t.Errorf("%s holds %d chunks, is home to %d", n.id, held, homes[n.id])
		}
	}
	if s := nodes[0].peer.Stats(); s.Peer.Bytes+s.Home.Bytes != 0 {
		t.Errorf("the warming node received chunk bytes: %+v", s)
	}
	before := chunkGets(nodes...)
	for _, n := range nodes {
		for i, src := range readAll(t, n, f) {
			if src == peer.SourceS3 {
				t.Errorf("%s: chunk %d from S3 after warm-up", n.id, i)
			}
		}
	}
	if got := chunkGets(nodes...); got != before {
		t.Errorf("reads after warm-up made %d S3 GETs", got-before)
	}
	t.Logf("homes %v", homes)
}
