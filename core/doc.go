// Package core is the file-system core of a mounted pool: a DRAM index over the
// persistent structures of package format, changed only through journal
// transactions.
//
// Persistent and DRAM state are kept apart: an Inode holds a decoded copy
// of its slot (d) plus DRAM-only indexes (sorted extents, directory name
// map, xattr list, open count). Every change to persistent state is staged
// into a journal.Tx as whole encoded structures and becomes visible in
// DRAM only after the transaction commits.
//
// Where its locks (FS.nsMu, range locks, Inode.mu, session.cmu, FS.imu,
// FS.pmu, FS.tierMu) sit among the others: DESIGN.md §Lock order, the
// only list. A function whose name ends in Locked expects its receiver's
// mutex held (Inode.mu for an *Inode); one whose receiver is another
// (*FS, *change) or has none says which lock in a "Precondition:" line
// above it (usually the Inode.mu of an argument).
//
// What it owns: inodes and their lifetime (links, opens, kernel
// references, orphans: DESIGN.md §Inode lifetime), directories, file data
// and its extents, xattrs and ACLs, permissions and times, the glue of
// segmented sessions (which file has one, progress, when a tail moves),
// and storage for the embedding tier's metadata (CreateExt, WriteExt,
// Registry), which it journals without interpreting.
//
// What it must not do: touch the pool other than through its pmem.Medium,
// decode media other than with package format's codecs (recovery.Mount reads
// the pool at mount, journal/seglog owns a session's log), interpret the
// embedding tier's descriptors beyond their header (size, block count) or
// its registry, or return a syscall.Errno (fs
// maps core's sentinel errors).
package core
