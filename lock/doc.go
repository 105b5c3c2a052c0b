// Package lock implements the per-thread byte-range locks of dnnfs
// (DESIGN.md §Range locks): every open file has a run queue and a wait queue of
// locks, each lock the tuple (thread id, start, end, next) plus a mode.
//
// Granting rule: a lock runs iff it conflicts with no lock in the run
// queue and with no lock waiting ahead of it in the wait queue. Two locks
// conflict when their ranges overlap and either is exclusive. From this
// rule follow the semantics of DESIGN.md §Range locks:
//
//   - a whole-file lock (another application's request) runs only when the
//     run queue and the wait queue hold nothing it conflicts with — for a
//     writer, only when both are empty;
//   - a range lock arriving while a conflicting whole-file lock runs or
//     waits goes on the wait queue and blocks; when the whole-file lock is
//     released, the waiting range locks move to the run queue and wake;
//   - waiters are served in FIFO order among conflicting locks, so neither
//     a stream of range locks starves a whole-file waiter nor the reverse;
//   - locks on disjoint ranges never wait for each other.
//
// On purpose, and unlike a plain reading of the queues: shared (read) locks never conflict
// with each other, whole-file or not, so readers from other programs run
// beside a job's readers.
//
// Where these locks sit among the other locks of dnnfs: DESIGN.md §Lock order
// (the only list).
//
// What it owns: the queues and the granting rule, wait/interrupt handling
// and lock statistics. What it must not do: know about inodes, files'
// sizes or sessions (core decides which range a request locks), or take
// any other lock while holding File.mu, a leaf in DESIGN.md §Lock order.
package lock
