// Package seglog is the two-layer segment log of a segmented-I/O session
// (DESIGN.md §Two-layer log): the persistent half that lets a job of n
// threads, each writing or reading its own segment of one file, resume
// after a crash from where each thread's durable progress ends.
//
// It owns:
//
//   - the layout of a session's log area: where the F_log header, the F_log
//     entries and the P_log lines (Tail_ptr) of each segment are (Layout);
//   - how a file is split into segments (Split);
//   - the persist steps of the log: start (Create), tail move (MoveTail),
//     the entry records of a segment's first thread and of its finish
//     (StageEntry, into a journal transaction), and the inode fields that
//     link, finish or abandon a session (Fields);
//   - reading a log back into resume points (Read, at mount) and its
//     validation (Check, for the offline checker), with sentinel errors for
//     torn or garbage logs;
//   - the resume-point report of `dnnfs recover` and user.dnnfs.session
//     (Report).
//
// It must not know about inodes beyond their on-media session fields, file
// extents, range locks, FUSE or the allocator: the caller (package core)
// decides which file has a session, allocates and frees the log's blocks,
// tracks the progress writes make, decides when a tail moves (the tail
// interval), passes the pool ranges of the data a tail covers, and commits
// the journal transactions that carry the entry and inode records. It must
// not import core or recovery; recovery imports it. The codecs of the
// header and entries are package format's (FLogHeader, FEntry).
//
// # On-media layout
//
// An open session owns two runs of data blocks, the F_log (header and
// one entry per segment) and the P_log (one Tail_ptr line per segment),
// n segments, 1 .. 1024. Their byte layout is FORMAT.md "Segmented-I/O
// session: F_log and P_log", which format/format_test.go checks against
// the codecs; it is not repeated here.
//
// The inode links the log (its fields: FORMAT.md "Inode"); their values
// by session state:
//
//	field        open session   finished        abandoned / none
//	Process_num  n              n               0
//	F_flag       0              1               0
//	F_log addr   Blk of F_log   0               0
//	size, mode   set            kept            0
//
// # Persist order
//
//	step          store                                              then
//	start         P_log region zeroed, Tail_ptr i = segment i start  Persist
//	              F_log header and entries (linked by Next)          Persist
//	              (caller) Tx: inode fields of the open session      commit  <- the session exists
//	tail move     (writes) the file data below the new tail          Flush each range, Fence
//	              8-byte Tail_ptr                                    Persist (no Tx)
//	first thread  Tx: the segment's entry with its Pid               commit
//	segment done  Tx: the entry with P_flag 1, P_log_addr 0          commit
//	close         (caller) Tx: inode fields finished or none         commit, then the regions are freed
//
// A crash before the start's Tx leaves both regions unreferenced (free at
// the next mount). A Tail_ptr never runs ahead of durable data; it may lag,
// and the job then redoes at most one tail interval per segment.
package seglog
