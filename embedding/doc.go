// Package embedding is dnnfs's SSD tier for the embedding tables of
// recommendation models (DESIGN.md §Embedding tier): tables too big for the pool keep
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
//   - Placement (DESIGN.md §Placement): a new shard goes to the device with the best
//     weighted score of free space, bandwidth and how few shards of the same
//     table it already holds; freed shard space is reused best-fit first,
//     and retained space above a threshold is punched out of the file.
//   - Scheduler (DESIGN.md §Size-aware scheduler): a request's size class is its row count
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
//   - Compute stage (DESIGN.md §Compute stage): loaders only read; a
//     lookup's gather or pooling is a compute request the compute
//     scheduler places on a processing element (CPU workers, unrolled
//     kernels; other kinds behind the same interface): an idle preferred
//     one, else an idle less preferred one, else the least loaded
//     preferred one, from the completions elements report on a ready
//     queue. An element that runs a superset of another's ops takes from
//     its queue when its own is empty and the other is busy.
//     --compute-elements 0 pools on the loader as before.
//   - Migration: per-shard heat and per-device load counters; a migrator
//     replicates hot shards to the least-loaded device and moves shards
//     off devices short of space. A move copies, fdatasyncs, commits the
//     one shard entry, then switches readers; old space is reused only
//     after the reads in flight on it finish.
//
// # Request files
//
// Each table T has a request file T.lookup (served by package fs): one
// write() is one batched lookup, one read() one completed result. The
// request and result formats, the lookup modes and the dtypes are package
// embedding/wire's; its package doc has the byte layout. Table.ParseLookup
// checks a request against the table, Table.Lookup runs it.
//
// # Lock order
//
// The tier's locks (migrator.mu, shard.wgate, Tier.mu, Device.qmu,
// Device.tmu, computeSched.mu, computeSched.readyMu, spaceMap.mu,
// sleeper.mu) are in DESIGN.md §Lock order with
// the rest of dnnfs's.
package embedding
