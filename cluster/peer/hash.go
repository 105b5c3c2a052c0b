package peer

import (
	"hash/fnv"

	"github.com/dnnfs/dnnfs/cluster/objstore"
)

// HashKey is the name a chunk is hashed by: "<id>/<ver>/<chunk>".
func HashKey(ref objstore.ChunkRef) string { return ref.String() }

// Home returns the node among nodes that a chunk's key hashes to by
// rendezvous (highest random weight) hashing: every node scores
// hash(node, key) and the highest wins. Removing a node moves only the
// keys it was home to (about 1/N of them), spread over the rest; adding
// one takes about 1/(N+1) from the others. Every node computes the same
// answer from the same live set, so the function and its hash must never
// change (TestHomeStable pins them). ok is false when nodes is empty.
func Home(key string, nodes []Node) (home Node, ok bool) {
	var best uint64
	for _, n := range nodes {
		s := score(n.ID, key)
		if !ok || s > best || (s == best && n.ID < home.ID) {
			home, best, ok = n, s, true
		}
	}
	return home, ok
}

// score is FNV-1a 64 of "<node>\x00<key>" through splitmix64's finalizer:
// FNV alone leaves keys that differ in their last bytes with scores close
// enough to favour one node.
func score(id NodeID, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(key))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
