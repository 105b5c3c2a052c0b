// Package ids holds the identities of a dnnfs cluster (DESIGN §Cluster):
// the one definition, text form and syntax check of each, shared by
// cluster/namespace (etcd), cluster/objstore (S3), cluster/peer and the
// cluster glue, which re-export them under their own names.
//
// What it owns:
//
//   - NodeID (--node-id, 1 to 64 of [a-z0-9._-], a component of etcd
//     keys), FSID and FileID (32 lower-case hex digits, random: NewFSID,
//     NewFileID), Version (1 up, +1 per commit), ChunkIdx, and the pairs
//     ChunkRef (a chunk: file, version, index; its String is its name in
//     the peer protocol and in rendezvous hashing) and FileVersion;
//   - their checks (Valid, the Parse functions), which fail with
//     ErrInvalid, the one "not well formed" error of the cluster packages
//     (namespace.ErrInvalid and peer.ErrBadNodeID are it).
//
// What it must not do: import anything of ours, or know a record's or an
// object's layout (etcd keys and JSON values, S3 keys, manifests, the
// peer protocol's paths): those codecs live with the store they describe.
package ids
