// Package embedding is dnnfs's SSD tier for the embedding tables of
// recommendation models (SEEDS.md §2–§4): tables too big for the pool keep
// their rows in backing files on SSD-tier devices, and every read of a
// table — a plain pread through the mount or a batched, pooled lookup
// through the table's request file — goes through a size-aware scheduler
// to per-device loaders.
//
// # Pieces of the design
//
//   - Device: one directory (one SSD) with a backing file
//     DIR/dnnfs-tier.dat; optionally a device model (bandwidth, latency,
//     channels, capacity) that throttles I/O to emulate a distinct SSD.
//   - Translation table: per table, shard i (a run of contiguous rows) ->
//     (device, offset), plus an optional replica; stored in the pool
//     (format.ShardEntry), journaled, checked by fsck.
//   - Placement (SEEDS.md §3): a new shard goes to the device with the best
//     weighted score of free space, bandwidth and how few shards of the same
//     table it already holds; freed shard space is reused best-fit first,
//     and retained space above a threshold is punched out of the file.
//   - Scheduler (SEEDS.md §2): a request's size class is its row count
//     (default <=128, 129..512, >512 rows). The manager splits each request
//     by the translation table into pieces (one device each, at most
//     MaxPiece bytes) and queues them on their device in the request's
//     class queue. Each device has one loader per channel; a free loader
//     takes the next piece by weighted round-robin over the device's
//     non-empty class queues (a class's turn is up to its weight of
//     pieces, --class-weights, default 16,4,1; 1,1,1 is plain round-robin),
//     FIFO within a class. With --sched=fifo there is one queue.
//   - Guarantee (size-aware mode): a piece waits behind at most one piece
//     in service per loader of its device plus, per round, the other
//     non-empty classes' turns (at most their weights in pieces); never
//     behind a whole large request. Under contention a class with weight
//     w gets at least w/(sum of the non-empty classes' weights) of the
//     device's pieces, so no class starves.
//   - Migration: per-shard heat and per-device load counters; a migrator
//     replicates hot shards to the least-loaded device and moves shards
//     off devices short of space. A move copies, fdatasyncs, commits the
//     one shard entry, then switches readers; old space is reused only
//     after the reads in flight on it finish.
//
// # Request file wire format
//
// Each table T has a request file T.lookup in the same directory (not
// listed by readdir; the name is reserved while T is a table). A process
// opens it read-write, write()s a whole request in one write call, and
// read()s results from the same handle. The handle is a stream (no
// seeking): every read() returns the next completed result, whole, in
// completion order (so not necessarily request order; match by tag). A
// write never waits for I/O; a read waits for the next completion like a
// pipe (EAGAIN with O_NONBLOCK instead), and returns 0 bytes (EOF) if a
// close() of any descriptor of the handle happens while it waits — the
// way to stop reader threads (in Go, close a unix.Dup of f.Fd(): os.File
// defers close(2) until a pending Read returns). Results larger than the reader's buffer continue on the next
// read() by the same thread. Several threads may share a handle; a
// handle may have up to 4096 requests in flight (EAGAIN beyond).
//
// Request (little-endian):
//
//	offset  size  field
//	0       4     magic 0x514C4E44 ("DNLQ")
//	4       2     version, 1
//	6       1     mode: 0 gather, 1 sum, 2 mean
//	7       1     dtype the caller expects the table to have: 1 f32, 2 f16, 3 bf16
//	8       8     tag, echoed in the result
//	16      4     flags: bit 0 = per-sample weights follow (mode sum only)
//	20      4     reserved, zero
//	24      8     n: number of indices
//	32      8     b: number of offsets (bags); 0 for gather
//	40      8     total request bytes: 48 + 8n + 8b (+ 4n with weights)
//	48      8n    indices, int64, each in [0, rows)
//	48+8n   8b    offsets, int64, like torch.nn.EmbeddingBag: bag j is
//	              indices[offsets[j] : offsets[j+1]] (the last bag runs to
//	              n); offsets[0] = 0, non-decreasing, <= n
//	...     4n    per-sample weights, float32 (flag bit 0)
//
// Result:
//
//	offset  size  field
//	0       4     magic 0x524C4E44 ("DNLR")
//	4       4     status: 0, or an errno (5 EIO: a device failed; the
//	              payload is empty)
//	8       8     tag
//	16      8     payload bytes
//	24      4     count: rows (gather) or bags (sum, mean)
//	28      1     payload dtype: gather = the table's, sum/mean = 1 (f32)
//	29      3     reserved
//	32      ...   payload: count rows of dim values; an empty bag pools to
//	              zeros
//
// A malformed request (bad magic, version, mode, dtype mismatch, an index
// out of range, offsets not starting at 0 or decreasing, a length that
// disagrees with n and b, a write shorter than its header says) fails its
// write with EINVAL and a log line naming the field; it never reaches the
// scheduler and other requests on the handle are unaffected.
//
// # Lock order
//
//	migrator.mu    one balance pass at a time
//	shard.wgate    writers (shared) vs a move of that shard (exclusive)
//	Tier.mu        the tables map
//	Device.qmu     a device's class queues (leaf)
//	Device.tmu     a device model's transfer timeline (leaf)
//	spaceMap.mu    a device's free space (leaf)
//	sleeper.mu     the device models' deadline heap (leaf)
//
// The device list is fixed when the tier opens and read without a lock.
package embedding
