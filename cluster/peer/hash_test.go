package peer_test

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/cluster/peer"
)

func nodesNamed(ids ...string) []peer.Node {
	var ns []peer.Node
	for _, id := range ids {
		ns = append(ns, peer.Node{ID: peer.NodeID(id), URL: "http://" + id})
	}
	return ns
}

func home(t *testing.T, key string, nodes []peer.Node) peer.NodeID {
	t.Helper()
	h, ok := peer.Home(key, nodes)
	if !ok {
		t.Fatal("no home")
	}
	return h.ID
}

// TestHomeStable pins the hash: every node must compute the same home for
// a chunk, whichever build of dnnfs it runs, so a change here is a change
// of protocol.
func TestHomeStable(t *testing.T) {
	nodes := nodesNamed("a", "b", "c")
	id := objstore.FileID("0123456789abcdef0123456789abcdef")
	var got string
	for i := 0; i < 16; i++ {
		got += string(home(t, peer.HashKey(objstore.ChunkRef{File: id, Ver: 1, Idx: objstore.ChunkIdx(i)}), nodes))
	}
	if want := goldenHomes; got != want {
		t.Fatalf("homes of chunks 0-15 over a, b, c: %s, pinned %s", got, want)
	}
	if k := peer.HashKey(objstore.ChunkRef{File: id, Ver: 3, Idx: 7}); k != string(id)+"/3/7" {
		t.Fatalf("hash key %q", k)
	}
	// The order nodes are listed in does not matter.
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 100; i++ {
		key := fmt.Sprintf("%s/1/%d", id, i)
		want := home(t, key, nodes)
		shuffled := append([]peer.Node(nil), nodes...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if h := home(t, key, shuffled); h != want {
			t.Fatalf("key %s: home %s, or %s in another order", key, want, h)
		}
	}
	if _, ok := peer.Home("x", nil); ok {
		t.Fatal("a home among no nodes")
	}
}

// goldenHomes is the output of TestHomeStable's loop when the hash was
// chosen (FNV-1a 64 through splitmix64's finalizer).
const goldenHomes = "cabbcaccccaaaaab"

// TestHomeMoves: when one of N nodes leaves, exactly the keys it was home
// to move (about 1/N), spread over the others; when one joins, the keys
// that move all move to it; every node is home to about 1/N.
func TestHomeMoves(t *testing.T) {
	const keys = 20000
	five := nodesNamed("n0", "n1", "n2", "n3", "n4")
	four := nodesNamed("n0", "n1", "n3", "n4") // n2 left
	six := nodesNamed("n0", "n1", "n2", "n3", "n4", "n5")
	share := map[peer.NodeID]int{}
	moved, movedTo := 0, map[peer.NodeID]int{}
	joined := 0
	for i := 0; i < keys; i++ {
		key := fmt.Sprintf("%032x/1/%d", i*7919, i%97)
		h5, h4, h6 := home(t, key, five), home(t, key, four), home(t, key, six)
		share[h5]++
		if h5 == "n2" {
			moved++
			movedTo[h4]++
		} else if h4 != h5 {
			t.Fatalf("key %s moved from %s to %s though %s did not leave", key, h5, h4, h5)
		}
		if h6 != h5 {
			if h6 != "n5" {
				t.Fatalf("key %s moved from %s to %s when n5 joined", key, h5, h6)
			}
			joined++
		}
	}
	// Binomial counts: 1/5 of 20000 is 4000 with a standard deviation of
	// about 57; the bounds are over 10 of them away.
	within := func(what string, n, want int) {
		if n < want*8/10 || n > want*12/10 {
			t.Errorf("%s: %d, want about %d", what, n, want)
		}
	}
	for _, n := range five {
		within("keys homed on "+string(n.ID), share[n.ID], keys/5)
	}
	within("keys moved when n2 left", moved, keys/5)
	for _, n := range four {
		within("moved keys that went to "+string(n.ID), movedTo[n.ID], keys/5/4)
	}
	within("keys moved to n5 when it joined", joined, keys/6)
	t.Logf("n2 left: %d of %d keys moved (%v); n5 joined: %d moved", moved, keys, movedTo, joined)
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{"s3cret\n": "s3cret", "  a b \n\n": "a b", "\n": "", "": ""} {
		p := filepath.Join(dir, "token")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		tok, err := peer.ReadTokenFile(p)
		if want == "" && !errors.Is(err, peer.ErrNoToken) || want != "" && (err != nil || tok != want) {
			t.Errorf("token file %q: %q, %v", content, tok, err)
		}
	}
	if _, err := peer.ReadTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing token file")
	}
	if _, err := peer.New(peer.Config{Self: "a", Dir: (&fixedDir{}).view("a"), Local: newMemLocal(), Catalog: peer.Chain{}}); !errors.Is(err, peer.ErrNoToken) {
		t.Errorf("New without a token: %v", err)
	}
	if _, err := peer.New(peer.Config{Self: "A!", Token: "t", Dir: (&fixedDir{}).view("a"), Local: newMemLocal(), Catalog: peer.Chain{}}); !errors.Is(err, peer.ErrBadNodeID) {
		t.Errorf("New with a bad node id: %v", err)
	}
}
