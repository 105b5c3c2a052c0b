// Package pmem maps a persistent-memory pool and gives it one set of
// persistence primitives, whatever the medium underneath.
//
// A pool is one of:
//
//	kind      what it is                                  how it is mapped            Flush
//	DevDAX    a DAX character device (/dev/daxN.M)        MAP_SHARED                  CLWB/CLFLUSHOPT/CLFLUSH
//	FSDAX     a file on a DAX-mounted file system         MAP_SHARED_VALIDATE|MAP_SYNC CLWB/CLFLUSHOPT/CLFLUSH
//	Emulated  an ordinary (sparse) file, the default      MAP_SHARED                  msync(MS_SYNC) of the pages
//
// Every byte the file system moves to or from the pool goes through one
// Medium; its operations mean the same thing on every medium:
//
//	WriteAt(p, off)   store p at off (not yet durable: Flush/Persist it)
//	Fallocate(off, n) back [off, off+n) so later stores cannot fail for space
//	Punch(off, n)     make [off, off+n) read as zeros, durably
//	Flush(off, n)     write back the cache lines (or pages) covering [off, off+n)
//	Fence()           order: every Flush issued before completes before any later store
//	Persist(off, n)   Flush then Fence: [off, off+n) is durable when it returns nil
//
// Each returns its failure. After a failed Flush, Fence or Persist (msync on
// emulated pools) the range's bytes must be assumed lost on media even
// though the mapping still shows them; after a failed WriteAt, any prefix of
// p may have been stored.
//
// Small structures are stored straight into Bytes() and then persisted;
// reads are loads from Bytes() (the DAX way, and faster than pread here).
// On media, structures hold offsets into Bytes(), never pointers.
//
// What it owns: opening, locking, mapping and closing pools; the medium
// operations above and their errors; the test media (Memory, Recorder for
// crash images, Faulty for injected failures and torn writes).
//
// What it must not do: know the on-media format (beyond a pool's size), or
// report a failed write-back as success.
package pmem
