// Package cluster is the glue between a dnnfs pool (core) and the cluster
// packages (DESIGN §Cluster): it makes a regular file of the pool a file
// of the cluster's one namespace.
//
// What it owns:
//
//   - Dial and Start: the connection to etcd (cluster/namespace), to S3
//     (cluster/objstore) and the chunk server (cluster/peer) of one
//     daemon, checked before the pool is opened, so that a bad
//     configuration is a one-line error and leaves the pool untouched;
//   - the per-file cluster state: a pool file that is a cluster file
//     carries the xattr XattrState ({"id","ver","base","cs","chunks"}:
//     its FileID, the committed version its bytes are of, the etcd mod
//     revision of that version, the chunk size and the chunks of that
//     version present in the pool), mirrored in memory;
//   - placeholders: a name committed on another node becomes, at Lookup
//     or Readdir, a local file of the right size, owner, mode and mtime
//     with no chunk present;
//   - lazy fill: a read first fetches the missing chunks it touches
//     (peer.Fetch: local → holder → home → S3, one flight per chunk) and
//     stores them in the file, so this node becomes a holder;
//   - close-to-open: an open compares the file's version with the
//     committed one and a newer version discards the local chunks;
//   - the writer side: an open for writing takes the cluster's writer
//     lock (ErrWriterBusy when another node holds it: EBUSY at the FUSE
//     boundary), fills every chunk first unless it truncates, and fsync or
//     close commits (changed chunks, then the manifest, then one etcd
//     transaction; a failure is ErrCluster, EIO, and nothing new is
//     visible);
//   - unlink and rename go through the namespace transaction first;
//   - eviction (evict.go): below the pool's low watermark, or on ENOSPC
//     when a fill stores a chunk, the least recently read clean chunks of
//     committed versions leave the pool (state first, then the punch);
//     reads pin their chunks (Pin) so none goes under a read;
//   - peer.Local (chunks of the pool, served only when the local file
//     holds exactly that version's chunk; chunks of files this node has no
//     name for, filled for others as their home node, in a bounded memory
//     cache) and peer.Directory (on cluster/namespace);
//   - watches: a commit or a name change on another node invalidates the
//     kernel's cached attributes and entries here (Notifier).
//
// Where in the code: node.go (Dial, Start, Close, Status, peer.Directory,
// the memory cache), services.go (what it needs of etcd and S3), file.go
// (a file's state and its xattr), names.go (Lookup, SyncDir, placeholders,
// Symlinked), version.go (close-to-open: reset, revalidate; MetaChanged),
// open.go (Open, Flush, Fsync, Release), write.go (Wrote, Truncate,
// Resized), read.go (Fill, read-ahead, storing a chunk), local.go
// (peer.Local), commit.go (upload, then the namespace step), rename.go
// (Unlink, Rename), watch.go (the file and name watches), warm.go (dnnfs
// warmup), attach.go (dnnfs attach), evict.go, background.go (work no
// caller waits for: its failures are logged and counted), errors.go.
//
// What it must not do: import fs or speak syscall.Errno (fs maps its
// sentinels, ErrWriterBusy and ErrCluster), change anything when the cluster is off (fs
// and cmd/dnnfs hold a nil *Node then, and every method of a nil *Node
// does nothing), or let core import it.
package cluster
