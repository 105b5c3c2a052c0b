// Package namespace owns everything dnnfs keeps in etcd (DESIGN §Cluster,
// "Keys"): the connection, the cluster's fsid, node membership under a lease, the
// path → file id names, the file records (each file's committed version),
// the holder records (which node holds which chunks in its pool), the
// one-writer lock, and the watches that keep other nodes current.
//
// It must not know about pools, FUSE, S3 or peers: it stores and reads
// records and says what failed. It imports no package of this module but
// internal/* (layer 1).
//
// # Keys
//
// Every key starts with the prefix (--etcd-prefix, default /dnnfs). Values
// are JSON, one codec each in records.go. Keys bound to the node lease
// vanish when the node closes (the lease is revoked) or dies (it expires
// after Config.LeaseTTL).
//
//	| key                                | lease      | value                                          |
//	|------------------------------------|------------|------------------------------------------------|
//	| <prefix>/fsid                      | no         | {"fsid":"<32 hex>","chunk_size":N}             |
//	| <prefix>/nodes/<node>              | node lease | {"peer":"https://…:7600","started":ns,"pid":N} |
//	| <prefix>/names/<path>              | no         | {"id":"<FileID>"}                              |
//	| <prefix>/files/<id>                | no         | FileRecord (below)                             |
//	| <prefix>/holders/<id>/<ver>/<node> | node lease | {"chunks":"0-3,7"}                             |
//	| <prefix>/writers/<id>              | node lease | {"node":"<node>","since":ns}                   |
//
// <path> is relative to the mount root, '/'-separated, without a leading
// '/' (CleanPath). Directories are implied by the names below them: there
// is no directory record, so an empty directory is not in etcd. <ver> is
// decimal. The fsid record is created once, by the first node, with a
// create-if-absent transaction; its chunk_size is the cluster's.
//
// # Values
//
//	| record  | field      | type   | meaning                                                    |
//	|---------|------------|--------|------------------------------------------------------------|
//	| fsid    | fsid       | string | the cluster's id, 32 lowercase hex (S3 keys start with it) |
//	| fsid    | chunk_size | int    | bytes per chunk of new files, fixed at creation            |
//	| nodes   | peer       | string | URL of the node's chunk server                             |
//	| nodes   | started    | int    | unix ns when the node registered                           |
//	| nodes   | pid        | int    | the daemon's process id (for the duplicate-node error)     |
//	| names   | id         | string | FileID: 32 lowercase hex, random, kept by renames          |
//	| files   | version    | int    | committed version, 1 up, +1 per commit                     |
//	| files   | size       | int    | bytes                                                      |
//	| files   | chunk_size | int    | bytes per chunk of this file                               |
//	| files   | manifest   | string | S3 key of this version's manifest                          |
//	| files   | mode       | int    | permission and type bits (type 0 or S_IFREG: a file; S_IFLNK: a symlink) |
//	| files   | target     | string | a symlink's target (then chunk_size 0, manifest "", size = its length); absent otherwise |
//	| files   | mtime      | int    | unix ns                                                    |
//	| files   | uid, gid   | int    | owner                                                      |
//	| holders | chunks     | string | chunk indexes held, as sorted ranges "0-3,7" (Chunks)      |
//	| writers | node       | string | the node holding the file's writer lock                    |
//	| writers | since      | int    | unix ns when it took it                                    |
//
// # Transactions
//
// Each change is one etcd transaction, so no other node ever sees half of
// it:
//
//	| call          | if                                                                                                             | then                                                                              |
//	|---------------|----------------------------------------------------------------------------------------------------------------|-----------------------------------------------------------------------------------|
//	| Open          | nodes/<node> absent                                                                                            | put nodes/<node> (lease)                                                          |
//	| Commit        | files/<id> mod rev = base; base = 0: names/<path> absent and placeable; writers/<id> ours if held, else absent | put files/<id>; base = 0: put names/<path>; put holders/<id>/<ver>/<self> (lease) |
//	| Rename (file) | names/<old>, names/<new> unchanged; <new> placeable                                                            | delete names/<old>, put names/<new>, delete the replaced file's record            |
//	| Rename (dir)  | every names/<old>/… unchanged, none added; <new> absent and placeable                                          | move every names/<old>/… to names/<new>/… (≤ MaxTxnOps/2 files)                   |
//	| Remove        | names/<path> unchanged                                                                                         | delete names/<path>, files/<id>                                                   |
//	| SetMeta       | files/<id> mod rev = base; writers/<id> ours if held, else absent                                              | put files/<id> (same version; mode, uid, gid, mtime)                              |
//	| AcquireWriter | writers/<id> absent                                                                                            | put writers/<id> (lease)                                                          |
//	| Release       | writers/<id> under the lock's lease                                                                            | delete writers/<id>                                                               |
//
// "Placeable": no name below the path (it is not a directory) and no file
// at a parent (ErrIsDir, ErrNotDir).
//
// # Failures
//
// Every error wraps one sentinel of errors.go: ErrInvalid, ErrUnavailable
// (etcd unreachable, no quorum or leader: the message names the
// endpoints; every call is bounded by its context or Config.OpTimeout, so
// none hangs), ErrDuplicateNode, ErrNotFound, ErrExists, ErrIsDir,
// ErrNotDir, ErrNotEmpty, ErrTooLarge, ErrConflict (a transaction raced
// with another node's: nothing of it is visible), ErrWriterHeld,
// ErrWriterLost, ErrClosed.
//
// A call whose etcd member is lost, or that meets a leader election, is
// tried again (on another member) until its deadline. A write whose
// attempt failed after it may have been applied is checked on the next
// attempt by its Else reads (the record is ours byte for byte, the name
// moved, the lock under our lease), so a retried Commit does not report
// its own earlier success as ErrConflict.
//
// When the node lease is lost (etcd unreachable for longer than its TTL)
// the node's lease-bound records are gone; the NS registers again under a
// new lease as soon as etcd answers and writes its holder records again,
// but its writer locks are lost: their commits fail with ErrWriterLost.
package namespace
