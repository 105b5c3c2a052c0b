package peer_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/cluster/peer"
)

// readAll fetches every chunk of f on n, in order, and checks the bytes.
func readAll(t *testing.T, n *node, f *file) []peer.Source {
	t.Helper()
	var srcs []peer.Source
	for i := range f.m.Chunks {
		b, src, err := n.peer.Fetch(context.Background(), f.ref(i))
		if err != nil {
			t.Fatalf("%s: chunk %d: %v", n.id, i, err)
		}
		if !bytes.Equal(b, f.chunk(i)) {
			t.Fatalf("%s: chunk %d from %s: wrong bytes", n.id, i, src)
		}
		srcs = append(srcs, src)
	}
	return srcs
}

// TestConcurrentReadersOneGetPerChunk: three nodes, each with two
// readers, load the same 8 chunks at once; S3 sees exactly one GET per
// chunk (the home node's fill, shared by every asker), every node ends up
// holding every chunk and says so.
func TestConcurrentReadersOneGetPerChunk(t *testing.T) {
	e := newEnv(t)
	f := e.commit(1, 8)
	nodes := []*node{e.addNode("a", nodeOpts{}), e.addNode("b", nodeOpts{}), e.addNode("c", nodeOpts{})}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for _, n := range nodes {
		for r := 0; r < 2; r++ {
			for i := range f.m.Chunks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b, src, err := n.peer.Fetch(context.Background(), f.ref(i))
					if err != nil {
						errs <- err
					} else if !bytes.Equal(b, f.chunk(i)) {
						errs <- errors.New(string(n.id) + ": wrong bytes from " + src.String())
					}
				}()
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := chunkGets(nodes...); got != 8 {
		t.Errorf("S3 chunk GETs: %d, want exactly 8 (one per chunk)", got)
	}
	var manifests int64
	for _, n := range nodes {
		s := n.store.Stats()
		manifests += s.ManifestGets
		if s.Requests != s.ChunkGets+s.ManifestGets+1 { // +1: Open's check
			t.Errorf("%s: %d S3 requests for %d chunk and %d manifest GETs: retries or strays", n.id, s.Requests, s.ChunkGets, s.ManifestGets)
		}
		t.Logf("%s: %+v", n.id, n.peer.Stats())
	}
	if manifests > 3 {
		t.Errorf("%d manifest GETs for 3 nodes", manifests)
	}
	for i := range f.m.Chunks {
		if h := e.dir.holdersOf(f.ref(i)); len(h) != 3 {
			t.Errorf("chunk %d held by %v, want all three", i, h)
		}
		for _, n := range nodes {
			if !n.local.has(f.ref(i)) {
				t.Errorf("%s does not keep chunk %d", n.id, i)
			}
		}
	}
	// Read again: all local now, no request anywhere.
	before := chunkGets(nodes...)
	for _, n := range nodes {
		for _, src := range readAll(t, n, f) {
			if src != peer.SourceLocal {
				t.Fatalf("%s: second read from %s", n.id, src)
			}
		}
	}
	if chunkGets(nodes...) != before {
		t.Fatal("second read went to S3")
	}
}

// TestOneNodeOneFlight: on a node alone (its own home), 8 concurrent
// readers of one chunk make one S3 GET.
func TestOneNodeOneFlight(t *testing.T) {
	e := newEnv(t)
	f := e.commit(2, 1)
	a := e.addNode("a", nodeOpts{})
	var wg sync.WaitGroup
	for r := 0; r < 8; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _, err := a.peer.Fetch(context.Background(), f.ref(0))
			if err != nil || !bytes.Equal(b, f.chunk(0)) {
				t.Errorf("Fetch: %d bytes, %v", len(b), err)
			}
		}()
	}
	wg.Wait()
	if got := chunkGets(a); got != 1 {
		t.Fatalf("S3 chunk GETs: %d, want 1", got)
	}
	// A version that was never committed has no manifest: an error at
	// once, not a chunk.
	if _, _, err := a.peer.Fetch(context.Background(), objstore.ChunkRef{File: f.id, Ver: 7}); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Fetch of an uncommitted version: %v", err)
	}
	if _, _, err := a.peer.Fetch(context.Background(), f.ref(1)); !errors.Is(err, peer.ErrNoChunk) {
		t.Fatalf("Fetch past the manifest's chunks: %v", err)
	}
}

// TestHolderKilled: the only holder of a file dies while another node
// reads it, by its listener and connections closing, and by dying in the
// middle of a reply; the reader gets every byte, no error.
func TestHolderKilled(t *testing.T) {
	for _, how := range []string{"closed", "mid-reply"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			f := e.commit(3, 8)
			var served atomic.Int64
			opts := nodeOpts{}
			if how == "mid-reply" {
				// After 3 chunks, every reply stops half-way and the
				// connection is cut, as when the process is killed.
				opts.handler = func(h http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if served.Add(1) > 3 {
							w = &dieMidway{ResponseWriter: w}
						}
						h.ServeHTTP(w, r)
					})
				}
			}
			a := e.addNode("a", opts)
			readAll(t, a, f) // a holds everything
			b := e.addNode("b", nodeOpts{})
			var srcs []peer.Source
			for i := range f.m.Chunks {
				if i == 3 && how == "closed" {
					a.srv.Close()
				}
				got, src, err := b.peer.Fetch(context.Background(), f.ref(i))
				if err != nil {
					t.Fatalf("chunk %d: %v", i, err)
				}
				if !bytes.Equal(got, f.chunk(i)) {
					t.Fatalf("chunk %d from %s: wrong bytes", i, src)
				}
				srcs = append(srcs, src)
			}
			for i, src := range srcs {
				if i < 3 && src != peer.SourcePeer {
					t.Errorf("chunk %d from %s before the holder died, want peer", i, src)
				}
				if i >= 3 && src == peer.SourcePeer {
					t.Errorf("chunk %d from a peer after the only holder died", i)
				}
			}
			// One failed request to the dead holder, then it is passed over.
			s := b.peer.Stats()
			if s.Peer.Requests != 4 || s.Peer.Hits != 3 || s.Home.Requests != 0 || s.Skipped == 0 {
				t.Errorf("peer %+v, home %+v, %d skipped: want 4 peer requests, 3 hits, none to the home, some skipped", s.Peer, s.Home, s.Skipped)
			}
			t.Logf("sources %v; b: %+v", srcs, s)
		})
	}
}

// dieMidway writes half of a reply's body and then aborts the connection.
type dieMidway struct {
	http.ResponseWriter
	written int
}

func (d *dieMidway) Write(p []byte) (int, error) {
	if d.written == 0 && len(p) > 1 {
		d.written = len(p) / 2
		d.ResponseWriter.Write(p[:len(p)/2])
		d.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	return d.ResponseWriter.Write(p)
}

// TestS3Stopped: with S3 down, chunks that a peer holds still load, on a
// node that never saw the manifest; one that nobody holds fails with the
// S3 error, not a wrong answer.
func TestS3Stopped(t *testing.T) {
	e := newEnv(t)
	f := e.commit(4, 8)
	g := e.commit(5, 1) // committed, never read: only in S3
	a := e.addNode("a", nodeOpts{})
	readAll(t, a, f)
	b := e.addNode("b", nodeOpts{}) // opened while S3 is up
	e.s3.Stop()
	for i, src := range readAll(t, b, f) {
		if src != peer.SourcePeer && src != peer.SourceHome {
			t.Errorf("chunk %d from %s with S3 stopped", i, src)
		}
	}
	_, _, err := b.peer.Fetch(context.Background(), g.ref(0))
	if !errors.Is(err, peer.ErrNoSource) || !errors.Is(err, objstore.ErrUnreachable) {
		t.Fatalf("Fetch of a chunk only S3 has, S3 stopped: %v", err)
	}
	t.Log(err)
	e.s3.Start()
	// On a, which did not just find S3 down for g's manifest (b would
	// wait a moment before asking again).
	got, src, err := a.peer.Fetch(context.Background(), g.ref(0))
	if err != nil || !bytes.Equal(got, g.chunk(0)) {
		t.Fatalf("after S3 is back: %d bytes from %s, %v", len(got), src, err)
	}
}

// TestBadTokenPeer: a node with another token answers 401 to the cluster's
// nodes, and they do not take chunks from it (nor it from them).
func TestBadTokenPeer(t *testing.T) {
	e := newEnv(t)
	f := e.commit(6, 8)
	x := e.addNode("x", nodeOpts{token: "some-other-token"})
	readAll(t, x, f) // x holds everything (its peers refused it: from S3)
	b := e.addNode("b", nodeOpts{})
	readAll(t, b, f)
	sx, sb := x.peer.Stats(), b.peer.Stats()
	if sx.Served != 0 || sx.ServedDenied == 0 {
		t.Errorf("x served %d chunks, denied %d requests", sx.Served, sx.ServedDenied)
	}
	// One 401, then x is passed over.
	if sb.Unauthorized != 1 || sb.Peer.Hits != 0 || sb.Skipped == 0 {
		t.Errorf("b: %d 401s, %d chunks from peers, %d skipped", sb.Unauthorized, sb.Peer.Hits, sb.Skipped)
	}
	// By hand: no token, a wrong one, the right one.
	url := x.srv.URL + "/v1/chunks/" + string(f.id) + "/1/0"
	for tok, want := range map[string]int{"": 401, token: 401, "some-other-token": 200} {
		req, _ := http.NewRequest("GET", url, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("token %q: %d, want %d", tok, resp.StatusCode, want)
		}
	}
}

// TestBadCRCPeer: a holder whose copy is corrupt, whether its header
// tells the true CRC or one matching the bad bytes, is passed over and
// the chunk comes from elsewhere, right.
func TestBadCRCPeer(t *testing.T) {
	for _, keepCRC := range []bool{true, false} {
		e := newEnv(t)
		f := e.commit(7, 2)
		a := e.addNode("a", nodeOpts{})
		readAll(t, a, f)
		a.local.corrupt(f.ref(0), keepCRC)
		a.local.corrupt(f.ref(1), keepCRC)
		b := e.addNode("b", nodeOpts{})
		readAll(t, b, f)
		s := b.peer.Stats()
		// The first chunk's check fails; then a is passed over.
		if s.BadCRC != 1 || s.Skipped != 1 || s.Peer.Hits != 0 {
			t.Errorf("keepCRC %v: %d bad crcs, %d chunks from peers: %+v", keepCRC, s.BadCRC, s.Peer.Hits, s)
		}
	}
}

// TestStaleHolder: a holder record that outlived the chunk (the node
// dropped it) gets a 404; the reader moves on, and asks that node again
// for the next chunk (a 404 is no fault of the node).
func TestStaleHolder(t *testing.T) {
	e := newEnv(t)
	f := e.commit(11, 4)
	a := e.addNode("a", nodeOpts{})
	readAll(t, a, f)
	a.local.drop()
	b := e.addNode("b", nodeOpts{})
	readAll(t, b, f)
	s := b.peer.Stats()
	if s.Peer.Requests != 4 || s.Peer.Hits != 0 || s.Skipped != 0 {
		t.Errorf("b: peer %+v, %d skipped; want 4 requests to the stale holder, none skipped", s.Peer, s.Skipped)
	}
	if a.peer.Stats().ServedMissing < 4 {
		t.Errorf("a answered %d 404s", a.peer.Stats().ServedMissing)
	}
}
