// Package peer is the peer memory tier of a dnnfs cluster (DESIGN §Cluster,
// "Reading"): every node serves the chunks in its
// pool to the other nodes over HTTP(S), and a reader pulls a chunk into its
// own pool from the nearest source, so N nodes loading one checkpoint fan
// out peer to peer instead of hitting the object store N times.
//
// What it owns: the chunk server (Peer.ServeHTTP) with its token check and
// its TLS setup (ServerTLS, ClientTLS), the fetch order below with one
// flight per chunk (golang.org/x/sync/singleflight), rendezvous hashing of
// chunks onto live nodes (Home), and the per-source counters (Stats).
// What it must not do: talk to etcd or know a pool's layout. It reaches
// the namespace through Directory (live nodes, holders of a chunk, "I hold
// this now"), the pool through Local, and a chunk's object and checksum
// through Catalog (ManifestCatalog reads manifests from S3); the cluster
// glue implements them on cluster/namespace and the pool.
//
// The protocol, one request:
//
//	GET /v1/chunks/<id>/<ver>/<chunk>[?fill=1]
//	Authorization: Bearer <cluster token>
//	Range: bytes=a-b            (optional; one range)
//
//	| reply | when                                                               |
//	|-------|--------------------------------------------------------------------|
//	| 200   | the whole chunk; X-Dnnfs-Crc32c: CRC-32C of the whole chunk, hex8  |
//	| 206   | the range asked for, with Content-Range; X-Dnnfs-Crc32c as for 200 |
//	| 400   | a malformed chunk path (<id> 32 lower-case hex, <ver> 1 up and <chunk> in canonical decimal), query or Range |
//	| 401   | a missing or wrong token (compared in constant time)               |
//	| 404   | not held here (and not ?fill=1), or any path outside /v1/chunks/   |
//	| 405   | a method other than GET                                            |
//	| 416   | a range past the chunk's end                                       |
//	| 502   | ?fill=1 and the fill from S3 failed                                |
//
// ?fill=1 is sent only to a chunk's home node: "fetch it from S3 if you do
// not hold it, once for all concurrent askers, keep it, then serve it".
// Nothing else is served: no paths, no listing, only chunks Local holds.
//
// Fetch order for a chunk (Peer.Fetch), one flight per chunk per node:
//
//  1. the local pool (Local);
//  2. a live node that holds it (Directory.Holders, random order, never
//     this node): a refused connection, an error, a 404, a 401 or a bad
//     checksum moves on to the next, no error reaches the reader;
//  3. its home node, the rendezvous hash of "<id>/<ver>/<chunk>" over the
//     live nodes, with ?fill=1; when this node is the home, it fills from
//     S3 itself, in the same flight as the fills it serves to others;
//  4. S3 directly.
//
// Every chunk from a peer or S3 is checked against the manifest's CRC-32C
// (Catalog) before it is kept (Local.StoreChunk) and announced
// (Directory.AddHolding). When the manifest cannot be had (S3 down and it
// is not cached) chunks still load from peers, checked against the CRC-32C
// the peer sends, so "S3 unreachable: chunks held by peers still load". A
// chunk the catalog says does not exist (no manifest for that version, an
// index past its end) is an error at once, without asking anyone.
//
// A peer that fails a request (no connection, a reply cut short, 401, a
// bad checksum) is passed over for Config.SuspectFor (about a node lease),
// so a dead holder costs one refused connection, not one per chunk; a 404
// or a home node's 502 (its S3 fill failed) does not make it suspect.
//
// Warm (dnnfs warmup) asks a chunk's home for it with ?fill=1 and
// "Range: bytes=0-0": the home fills and keeps the whole chunk, and one
// byte travels back, so warm-up spreads over the live nodes as homes do.
//
// Catalogs: ManifestCatalog resolves committed versions through their
// manifests (read once, kept); AttachCatalog resolves attached foreign
// objects (version 1, chunks are byte ranges of the object, no manifest,
// so no CRC-32C but a peer's); Chain asks several in turn.
package peer
