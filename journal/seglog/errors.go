package seglog

import "errors"

// ErrGeometry: Split was asked for segments that cannot be: no segments,
// more than format.MaxThreads, an empty file, or fewer 4 KiB blocks than
// segments.
var ErrGeometry = errors.New("seglog: session size cannot be split into that many segments")

// ErrNotDurable: a persist of the log, or a flush of the data a tail move
// covers, failed: the media may not hold what the mapping shows. After a
// failed Create nothing references the log; after a failed MoveTail the
// Tail_ptr on media is the old one or, if only its own persist failed,
// possibly the new one over data that is durable.
var ErrNotDurable = errors.New("seglog: segment log not durable")

// Sentinel errors of Read and Check. Each also wraps the codec's
// format.ErrBadChecksum or format.ErrCorrupt when a decode failed.
var (
	// ErrNoLog: Read was given inode fields that name no F_log (no open
	// session).
	ErrNoLog = errors.New("seglog: no segment log: the session fields name no F_log")
	// ErrFields: Check found the inode's session fields contradicting each
	// other (a bad F_flag, mode or Process_num, or an F_log on a finished
	// session).
	ErrFields = errors.New("seglog: inconsistent session fields")
	// ErrOutOfBounds: a log region lies outside the pool's data region, or the
	// P_log and F_log regions overlap.
	ErrOutOfBounds = errors.New("seglog: segment log region out of range")
	// ErrHeader: the F_log header fails its checksum or its region sizes
	// disagree with its count (torn or garbage bytes).
	ErrHeader = errors.New("seglog: the F_log header is damaged")
	// ErrCount: Check found an F_log whose entry count is not the inode's
	// Process_num.
	ErrCount = errors.New("seglog: the F_log's entry count differs from Process_num")
	// ErrEntry: an F_log entry fails its checksum, or names a segment
	// outside the session's bytes.
	ErrEntry = errors.New("seglog: an F_log entry is damaged")
	// ErrLink: Check found an entry whose Next or P_log_addr is not where
	// the layout puts it.
	ErrLink = errors.New("seglog: an F_log entry's link is damaged")
	// ErrTail: a Tail_ptr lies outside its segment.
	ErrTail = errors.New("seglog: a Tail_ptr lies outside its segment")
)
