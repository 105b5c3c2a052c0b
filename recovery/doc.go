// Package recovery reads a dnnfs pool after a crash: Mount (mount-time
// replay and rebuild, for package core), Check (fsck) and Repair.
//
// Mount reads the superblock pair, replays a committed journal
// transaction, decodes the inode table and rebuilds free space; it refuses
// a pool whose structures do not decode and leaves the full diagnosis to
// Check. It hands core what core needs for its DRAM indexes and changes
// nothing but the journal's replay: freeing orphans is core's, through
// the journal.
//
// The checker does not trust the mount code: it shares only the codecs of
// package format (one per on-media structure, the same ones the runtime
// uses) and re-derives every invariant the file system relies on (see
// FORMAT.md), so a bug in package core that writes a bad structure is
// caught here rather than trusted. It never calls Mount or core.Open.
// recovery must not import core (core imports it).
//
// Check never stores into the medium: a committed journal transaction is
// replayed into an in-memory overlay that every read goes through, so it
// is safe on a read-only or private mapping and on a live copy alike.
//
// Repair changes the pool only through journal transactions (except the
// superblocks and the journal header itself, which lie outside what a
// transaction may target), in small atomic units, so a crash during repair
// leaves a pool that the next Repair continues from. It fixes problems in
// phases, re-checking between them:
//
//	phase   fixes
//	tier    a damaged or shared SSD-tier registry (the superblocks' pointer
//	        is zeroed, primary then replica)
//	inode   damaged inodes (cleared, with the entries naming them), the root,
//	        bad fields (mode, flags, directory size, holes), bad xattr blocks,
//	        damaged sessions, damaged or overlapping embedding tables
//	        (cleared to empty files), table sizes
//	entry   damaged or dangling directory entries, duplicate names, second
//	        parents, wrong entry types
//	link    unreachable inodes, linked into /lost+found as "#<ino>"
//	count   link counts, orphans
//
// What it owns: everything that reads a pool after a crash — Mount's
// replay and rebuild, Check's diagnosis, Repair's fixes.
//
// What it must not do: import core, fs or embedding; write the pool in
// Check (or in Mount beyond the journal replay).
package recovery
